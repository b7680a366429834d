"""The repository's own documentation stays citable and its index true: links resolve, equation
numbers are unique and gapless per page, docs/README.md lists every algorithm page with the
equations it really numbers, and every citation ``(name.k)`` in the code and the docs, with or
without its ``docs/algorithms/name.md``, names an equation that exists (docs/README.md,
"Equation numbering")."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
# a label ends a line of an equation block or of a list item: "    ...   (spam.3)"
LABEL_AT_LINE_END = re.compile(r"\s\(([a-z_]+)\.(\d+)\)\s*$")
CITATION = re.compile(r"docs/algorithms/([a-z_]+)\.md \(([a-z_]+)\.(\d+)\)")
# any citation, bare "(auto.2)" or after its page; "(page.k)" in prose has no digits
BARE_CITATION = re.compile(r"\(([a-z_]+)\.(\d+)\)")
CITED_RANGE = re.compile(r"\(([a-z_]+)\.(\d+)\)\s*-\s*\(([a-z_]+)\.(\d+)\)")
# a row of docs/README.md's algorithm table, "| [spam.md](algorithms/spam.md) | ... | (equations) |"
INDEX_ROW = re.compile(r"^\| \[([a-z_]+)\.md\]\(algorithms/([a-z_]+)\.md\) \|.*\| ([^|]*) \|\s*$")
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


def _numbered() -> dict[str, list[int]]:
    """Each algorithm page's own equation numbers, sorted."""
    return {
        page.stem: sorted(number for name, number in _labels(page) if name == page.stem)
        for page in sorted((DOCS / "algorithms").glob("*.md"))
    }


def _text_files(folders: tuple[str, ...], suffixes: tuple[str, ...]) -> list[pathlib.Path]:
    files = []
    for folder in folders:
        files += sorted(
            p for p in (ROOT / folder).rglob("*") if p.suffix in suffixes and p.is_file()
        )
    return files


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


def test_the_index_lists_every_page_with_the_equations_it_numbers():
    numbered = _numbered()
    listed: dict[str, str] = {}
    problems = []
    for line in (DOCS / "README.md").read_text().splitlines():
        row = INDEX_ROW.match(line)
        if row is None:
            continue
        shown, target, equations = row.groups()
        if shown != target:
            problems.append(f"row [{shown}.md] links to algorithms/{target}.md")
        listed[target] = equations.strip()
    missing = sorted(set(numbered) - set(listed))
    unknown = sorted(set(listed) - set(numbered))
    if missing:
        problems.append(f"docs/README.md does not list {missing}")
    if unknown:
        problems.append(f"docs/README.md lists pages that do not exist: {unknown}")
    for name in sorted(set(listed) & set(numbered)):
        numbers = numbered[name]
        true = f"({name}.{numbers[0]})-({name}.{numbers[-1]})"
        if listed[name] != true:
            problems.append(f"docs/README.md: {name}.md {listed[name]}, the page has {true}")
    assert problems == []


def test_every_citation_names_an_equation_its_page_numbers():
    """Bare citations too: "(spam.3)" in a docstring is checked against docs/algorithms/spam.md,
    and a range "(name.i)-(name.j)" must run forward within one page."""
    numbered = {name: set(numbers) for name, numbers in _numbered().items()}
    files = [ROOT / "README.md"] + _text_files(
        ("core", "service", "docs", "tests", "bench", "loadtest"), (".py", ".md")
    )
    wrong = []
    for path in files:
        where = path.relative_to(ROOT)
        for row, line in enumerate(path.read_text().splitlines(), start=1):
            for name, number in BARE_CITATION.findall(line):
                if int(number) not in numbered.get(name, set()):
                    wrong.append(f"{where}:{row}: ({name}.{number})")
            for first, start, last, end in CITED_RANGE.findall(line):
                if first != last or int(start) >= int(end):
                    wrong.append(f"{where}:{row}: ({first}.{start})-({last}.{end})")
    assert wrong == []
