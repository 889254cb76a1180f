"""The docs stay true: every ``sim2real`` command shown in README.md and docs/**/*.md parses with the CLI's own
parser, the cheap ones run, every relative link (and its #anchor) points at something that exists, every package
path named in backquotes exists, and the README stays a five-minute read (under 250 lines).

Commands are taken from fenced shell code blocks (no language, ``bash``, ``sh``, ``shell``, ``console``): a line whose command is ``sim2real ...`` (after ``$ `` of a console
transcript, ``VAR=value`` prefixes or a path such as ``~/env/bin/sim2real``) or ``... -m sim2real ...`` (torchrun),
with backslash continuations joined and trailing ``# comments`` and a trailing ``&`` dropped. In a block that is a
console transcript (it has ``$ `` prompts) only the prompted lines are commands, the rest is output. Placeholders
such as ``<run>`` or ``<a ctbr policy>`` are replaced by a plain word before parsing.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from sim2real.cli import build_parser, main

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOC_FILES = [README, *sorted((REPO / "docs").rglob("*.md"))]
README_MAX_LINES = 250

FENCE = re.compile(r"^\s*(```|~~~)")
SHELL_LANGUAGES = ("", "bash", "sh", "shell", "console")
PLACEHOLDER = re.compile(r"<[^<>]+>")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
INLINE_CODE = re.compile(r"`([^`\n]+)`")
#: Top-level folders of the package (and of the repository) that a backquoted path may start with.
PACKAGE_DIRS = ("configs/", "sim/", "curricula/", "tasks/", "policies/", "deploy/", "hardware/", "bench/", "viewer/",
                "tests/", "docs/", ".ci/")


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO))


def code_blocks(path: Path) -> list[tuple[int, list[str]]]:
    """The fenced shell code blocks of a Markdown file (no language, ``bash``, ``sh``, ``shell``, ``console``;
    diagrams are fenced as ``text`` or ``mermaid``): (line number of the first line, lines)."""
    blocks, current, start, shell = [], None, 0, False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if FENCE.match(line):
            if current is None:
                current, start = [], number + 1
                shell = line.strip().strip("`~").strip().lower() in SHELL_LANGUAGES
            else:
                if shell:
                    blocks.append((start, current))
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def _join_continuations(lines: list[str], start: int) -> list[tuple[int, str]]:
    out, buf, first = [], "", None
    for number, line in enumerate(lines, start):
        if first is None:
            first = number
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        out.append((first, buf + line))
        buf, first = "", None
    if buf:
        out.append((first, buf))
    return out


def _sim2real_argv(line: str) -> list[str] | None:
    """The arguments after ``sim2real`` of a shell line, or None when the line runs no sim2real command."""
    text = line.strip()
    if text.startswith("$ "):
        text = text[2:]
    try:
        tokens = shlex.split(PLACEHOLDER.sub("X", text), comments=True)
    except ValueError:
        return None
    while tokens and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=\S*", tokens[0]):  # VAR=value prefixes
        tokens = tokens[1:]
    if tokens and tokens[-1] == "&":
        tokens = tokens[:-1]
    if not tokens:
        return None
    if tokens[0] == "sim2real" or tokens[0].endswith("/sim2real"):
        return tokens[1:]
    for i in range(len(tokens) - 1):  # torchrun ... -m sim2real train ...
        if tokens[i] == "-m" and tokens[i + 1] == "sim2real" and tokens[0] in ("torchrun", "python", "python3"):
            return tokens[i + 2:]
    return None


def doc_commands() -> list[tuple[str, list[str]]]:
    """Every sim2real command in a code block of the docs: (``file:line: text``, argv after ``sim2real``)."""
    found = []
    for path in DOC_FILES:
        for start, lines in code_blocks(path):
            transcript = any(line.startswith("$ ") for line in lines)
            for number, line in _join_continuations(lines, start):
                if transcript and not line.startswith("$ "):
                    continue
                argv = _sim2real_argv(line)
                if argv is not None:
                    found.append((f"{_rel(path)}:{number}: {line.strip()}", argv))
    return found


COMMANDS = doc_commands()


def test_docs_show_commands():
    # the extraction itself works: the README's set-up command and commands of every page are found
    where = {c.split(":", 1)[0] for c, _ in COMMANDS}
    assert "README.md" in where
    assert any(argv[:3] == ["train", "--task", "quadrotor-hover"] for _, argv in COMMANDS)
    for page in ("docs/training.md", "docs/deploy.md", "docs/benchmarks.md", "docs/finetuning.md"):
        assert page in where, f"no sim2real command found in {page}"


@pytest.mark.parametrize("where,argv", COMMANDS, ids=[c for c, _ in COMMANDS])
def test_doc_command_parses(where, argv):
    parser = build_parser()
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            args = parser.parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"{where}\n  does not parse with sim2real's parser (exit {exc.code}): {stderr.getvalue().strip()}")
    assert callable(getattr(args, "func", None)), where


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def test_list_runs_as_documented():
    from sim2real.configs import available_robots
    from sim2real.tasks import tasks

    shown = [argv for _, argv in COMMANDS if argv[:1] == ["list"]]
    assert shown, "the docs show `sim2real list`"
    for argv in shown:
        code, out, err = _run(argv)
        assert code == 0, err
        for name in [*tasks(), *available_robots()]:
            assert name in out, f"`sim2real list` does not show {name}"
    # the four tasks on three robots the README presents
    for name in ("quadrotor-hover", "quadrotor-swarm", "quadruped-jump", "humanoid-footsteps"):
        assert name in tasks()
        assert f"`{name}`" in README.read_text()


def _subcommand_paths(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                paths.append(prefix + (name,))
                paths.extend(_subcommand_paths(sub, prefix + (name,)))
    return paths


SUBCOMMANDS = _subcommand_paths(build_parser())


@pytest.mark.parametrize("path", SUBCOMMANDS, ids=[" ".join(p) for p in SUBCOMMANDS])
def test_subcommand_help_runs(path):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exc:
        build_parser().parse_args([*path, "--help"])
    assert exc.value.code == 0
    assert out.getvalue().startswith("usage: sim2real " + " ".join(path))


def test_every_subcommand_is_documented():
    shown = {tuple(argv[:1]) for _, argv in COMMANDS} | {tuple(argv[:2]) for _, argv in COMMANDS}
    missing = [" ".join(p) for p in SUBCOMMANDS if p not in shown]
    assert not missing, f"subcommands without an example in README.md or docs/: {missing}"


def test_code_fences_are_balanced():
    bad = []
    for path in DOC_FILES:
        opened = None
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if FENCE.match(line):
                if opened is None:
                    opened = number
                elif line.strip() not in ("```", "~~~"):
                    bad.append(f"{_rel(path)}:{number}: a closing fence with a language (block opened at line {opened})")
                else:
                    opened = None
        if opened is not None:
            bad.append(f"{_rel(path)}:{opened}: code block never closed")
    assert not bad, "\n".join(bad)


def test_readme_is_short():
    lines = README.read_text().splitlines()
    assert len(lines) < README_MAX_LINES, f"README.md has {len(lines)} lines (keep it under {README_MAX_LINES})"


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[|\]\([^)]*\)", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    anchors, seen, fenced = set(), {}, False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
        m = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            slug = _slug(m.group(1))
            n = seen.get(slug, 0)
            anchors.add(slug if n == 0 else f"{slug}-{n}")
            seen[slug] = n + 1
    return anchors


def _prose(path: Path) -> str:
    """The text of a Markdown file outside its fenced code blocks."""
    keep, fenced = [], False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            keep.append(line)
    return "\n".join(keep)


def test_relative_links_resolve():
    broken = []
    for path in DOC_FILES:
        for target in LINK.findall(_prose(path)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            if not dest.exists():
                broken.append(f"{_rel(path)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{_rel(path)}: {target} (no heading with that anchor in {dest.name})")
    assert not broken, "broken links:\n  " + "\n  ".join(broken)


IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
#: The most an image of the docs may weigh (kB).
IMAGE_MAX_KB = 200


def test_images_resolve_are_small_and_each_robot_page_shows_a_video_frame_and_the_viewer():
    """Every image a page shows exists and weighs under 200 kB; each robot page shows a frame of its ``play`` video
    (``img/play-<task>``) and a ``sim2real view`` screenshot (``img/viewer-<task>``)."""
    shown = {}
    for path in DOC_FILES:
        for target in IMAGE.findall(_prose(path)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue
            dest = (path.parent / target).resolve()
            assert dest.is_file(), f"{_rel(path)}: image {target} does not exist"
            shown.setdefault(path, []).append(dest.name)
    heavy = [f"{p.name}: {p.stat().st_size // 1000} kB" for p in (REPO / "docs" / "img").iterdir()
             if p.stat().st_size > IMAGE_MAX_KB * 1000]
    assert not heavy, f"images over {IMAGE_MAX_KB} kB: {heavy}"
    pages = sorted((REPO / "docs" / "robots").glob("*.md"))
    assert len(pages) == 4
    for page in pages:
        names = [n.rsplit(".", 1)[0] for n in shown.get(page, [])]
        for kind in ("play", "viewer"):
            assert f"{kind}-{page.stem}" in names, f"{_rel(page)} shows no img/{kind}-{page.stem}.*"


def test_docs_are_linked_from_the_readme_or_another_page():
    linked = set()
    for path in DOC_FILES:
        for target in LINK.findall(_prose(path)):
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target) and target.partition("#")[0]:
                linked.add((path.parent / target.partition("#")[0]).resolve())
    orphans = [_rel(p) for p in DOC_FILES[1:] if p.resolve() not in linked]
    assert not orphans, f"docs pages no page links to: {orphans}"


def test_package_paths_in_docs_exist():
    missing = []
    for path in DOC_FILES:
        for span in INLINE_CODE.findall(_prose(path)):
            for token in span.split():
                token = token.rstrip(".,;:)")
                if not token.startswith(PACKAGE_DIRS) or re.search(r"[<>*{}$\[\]|]", token):
                    continue
                if not (REPO / token).exists():
                    missing.append(f"{_rel(path)}: {token}")
    assert not missing, "paths named in the docs that do not exist:\n  " + "\n  ".join(sorted(set(missing)))


def test_the_stand_ins_rt_priority_is_documented_with_its_default():
    from sim2real.deploy.control_clock import STANDIN_RT_PRIORITY

    text = " ".join((REPO / "docs" / "deploy.md").read_text().split())
    assert (f"`sim2real standin` runs its physics and publishing at `SCHED_FIFO` `--rt-priority` (default "
            f"{STANDIN_RT_PRIORITY},") in text
