"""The repository's own documentation stays citable: links resolve, equation numbers are unique
and gapless per page, and every ``docs/...md (name.k)`` citation in the code names an equation
that exists (docs/README.md, "Equation numbering")."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
# a label ends a line of an equation block or of a list item: "    ...   (spam.3)"
LABEL_AT_LINE_END = re.compile(r"\s\(([a-z_]+)\.(\d+)\)\s*$")
CITATION = re.compile(r"docs/algorithms/([a-z_]+)\.md \(([a-z_]+)\.(\d+)\)")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _labels(page: pathlib.Path) -> list[tuple[str, int]]:
    labels = []
    in_fence = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_fence = not in_fence
            continue
        if in_fence or line.startswith("|"):
            continue
        match = LABEL_AT_LINE_END.search(line)
        if match:
            labels.append((match.group(1), int(match.group(2))))
    return labels


def test_docs_exist():
    names = {page.relative_to(DOCS).as_posix() for page in PAGES}
    assert {"README.md", "architecture.md", "algorithms/spam.md", "algorithms/svm_pauc.md"} <= names


def test_every_relative_link_resolves():
    broken = []
    for page in PAGES:
        text = re.sub(r"`[^`]*`", "", page.read_text())  # code spans are not links
        for target in LINK.findall(text):
            if "://" in target:
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert broken == []


def test_equation_numbers_are_unique_and_gapless_per_page():
    problems = []
    for page in sorted((DOCS / "algorithms").glob("*.md")):
        labels = _labels(page)
        own = [number for name, number in labels if name == page.stem]
        foreign = sorted({name for name, _ in labels if name != page.stem})
        if foreign:
            problems.append(f"{page.name} defines labels of {foreign}")
        if sorted(own) != list(range(1, len(own) + 1)):
            problems.append(f"{page.name}: numbers {sorted(own)} are not 1..{len(own)}")
        if not own:
            problems.append(f"{page.name} defines no equation")
    assert problems == []


def test_citations_in_the_code_name_existing_equations():
    defined = {
        (page.stem, number)
        for page in (DOCS / "algorithms").glob("*.md")
        for name, number in _labels(page)
        if name == page.stem
    }
    unknown = []
    files = [ROOT / "README.md"]
    for folder in ("core", "service", "tests", "bench", "loadtest"):
        files += sorted((ROOT / folder).rglob("*.py"))
    for path in files:
        for page, name, number in CITATION.findall(path.read_text()):
            if page != name or (name, int(number)) not in defined:
                where = path.relative_to(ROOT)
                unknown.append(f"{where}: docs/algorithms/{page}.md ({name}.{number})")
    assert unknown == []
