"""The system's headless Chromium under Selenium, for the dashboard tests and screenshot.

Uses Debian's ``chromium`` and ``chromium-driver`` packages (``apt-get install chromium
chromium-driver``); nothing is downloaded.  The browser is made offline: every host name but
127.0.0.1 / localhost fails to resolve, so a page that reached for a CDN would show it as a
failed request in its console (and in :func:`external_resources`).
"""

from __future__ import annotations

import base64
import contextlib
import shutil
from collections.abc import Iterator
from typing import Any

#: where Debian puts them; a PATH lookup first
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
DRIVER_NAMES = ("chromedriver",)


def find_chromium() -> tuple[str, str] | None:
    """(browser, driver) executables, or None when either is missing."""
    browser = next((path for name in CHROMIUM_NAMES if (path := shutil.which(name))), None)
    driver = next((path for name in DRIVER_NAMES if (path := shutil.which(name))), None)
    return (browser, driver) if browser and driver else None


@contextlib.contextmanager
def headless_chromium(width: int = 1400, height: int = 1000) -> Iterator[Any]:
    """A Selenium ``webdriver.Chrome`` on the system's Chromium, headless, offline, with the
    page's console kept (``driver.get_log("browser")``)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    found = find_chromium()
    if found is None:
        raise RuntimeError(
            "no Chromium: install Debian's chromium and chromium-driver "
            "(apt-get install -y chromium chromium-driver)"
        )
    browser, driver_path = found
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for argument in (
        "--headless=new",
        "--no-sandbox",  # containers run as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={width},{height}",
        # offline: only the loopback resolves
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE localhost",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    try:
        yield driver
    finally:
        driver.quit()


def console_errors(driver: Any) -> list[str]:
    """The SEVERE console entries since the last call (the log is drained as it is read)."""
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def resource_urls(driver: Any) -> list[str]:
    """Every URL the current page loaded: the document and its resources (scripts, styles,
    images, fetches), from the Resource Timing API."""
    return driver.execute_script(
        "return [location.href,"
        " ...performance.getEntriesByType('resource').map((entry) => entry.name)];"
    )


def external_resources(driver: Any, origin: str) -> list[str]:
    """The URLs of :func:`resource_urls` not on ``origin`` (``data:`` / ``blob:`` are local)."""
    return [
        url
        for url in resource_urls(driver)
        if not url.startswith((origin + "/", "data:", "blob:")) and url != origin
    ]


#: Distinct colours (RGBA) and the share of the most common one, in the browser (no imaging
#: library): for a canvas element, or for an image URL (a screenshot as a data: URL).
_PIXEL_STATS = """
const [target, done] = [arguments[0], arguments[arguments.length - 1]];
function stats(source, width, height) {
  const canvas = document.createElement('canvas');
  canvas.width = width; canvas.height = height;
  const context = canvas.getContext('2d');
  context.drawImage(source, 0, 0);
  const pixels = context.getImageData(0, 0, width, height).data;
  const counts = new Map();
  for (let i = 0; i < pixels.length; i += 4) {
    // with alpha: a chart's canvas is transparent where nothing is drawn, its text black at
    // varying opacity
    const colour = ((pixels[i] * 256 + pixels[i + 1]) * 256 + pixels[i + 2]) * 256 + pixels[i + 3];
    counts.set(colour, (counts.get(colour) || 0) + 1);
  }
  const top = Math.max(...counts.values());
  return {colours: counts.size, dominant_share: top / (width * height), width, height};
}
if (typeof target === 'string') {
  const image = new Image();
  image.onload = () => done(stats(image, image.naturalWidth, image.naturalHeight));
  image.onerror = () => done(null);
  image.src = target;
} else {
  done(stats(target, target.width, target.height));
}
"""


def canvas_stats(driver: Any, canvas: Any) -> dict[str, float]:
    """``colours`` and ``dominant_share`` of a ``<canvas>`` element's pixels."""
    return driver.execute_async_script(_PIXEL_STATS, canvas)


def png_stats(driver: Any, png: bytes) -> dict[str, float]:
    """``colours``, ``dominant_share``, ``width``, ``height`` of a PNG, decoded by the browser."""
    url = "data:image/png;base64," + base64.b64encode(png).decode()
    return driver.execute_async_script(_PIXEL_STATS, url)


def colour_pixels(driver: Any, canvas: Any, rgb: tuple[int, int, int], tolerance: int = 40) -> int:
    """How many pixels of a canvas are within ``tolerance`` (per channel) of ``rgb``."""
    return driver.execute_script(
        """
        const [canvas, [r, g, b], tolerance] = arguments;
        const pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
        let n = 0;
        for (let i = 0; i < pixels.length; i += 4) {
          const near = (offset, value) => Math.abs(pixels[i + offset] - value) <= tolerance;
          if (pixels[i + 3] > 0 && near(0, r) && near(1, g) && near(2, b)) n++;
        }
        return n;
        """,
        canvas,
        list(rgb),
        tolerance,
    )
