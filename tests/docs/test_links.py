"""The README is a map: at most 300 lines, linking every page of docs/, and every relative link in
README.md, docs/*.md and bench/README.md leads somewhere: the file exists, and a #anchor names a
heading of the target as GitHub writes its anchors (issue #43, item 2).
    python3 tests/docs/test_links.py --root . [-v]"""
import argparse
import glob
import os
import re
import sys
import unittest

ROOT = ""
README_MAX_LINES = 300

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
# [text](target) and ![alt](target); the target ends at whitespace or ')' (no title is used here).
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def documents(root):
    """The Markdown files whose links are checked, relative to the root."""
    docs = sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "docs", "*.md")))
    return ["README.md", *docs, os.path.join("bench", "README.md")]


def prose_lines(text):
    """(line number, line) of each line outside fenced code blocks."""
    inside = False
    for number, line in enumerate(text.split("\n"), start=1):
        if FENCE.match(line):
            inside = not inside
            continue
        if not inside:
            yield number, line


def slug(heading):
    """GitHub's anchor for a heading's text: the rendered text (links and code marks gone),
    lowercased, every character but letters, digits, spaces, '-' and '_' dropped, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = INLINE_CODE.sub(lambda m: m.group(2), text)
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML tags
    text = text.lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(text):
    """Every anchor GitHub gives the headings of a Markdown text (a repeated one gets -1, -2, ...)."""
    seen = {}
    result = set()
    for _, line in prose_lines(text):
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def links(text):
    """(line number, target) of every link outside code: fenced blocks and inline code spans."""
    for number, line in prose_lines(text):
        for target in LINK.findall(INLINE_CODE.sub("", line)):
            yield number, target


def broken_links(root, document):
    """A message for each relative link of the document that leads nowhere."""
    problems = []
    path = os.path.join(root, document)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for number, target in links(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:, ...
            continue
        file_part, _, anchor = target.partition("#")
        resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
        where = f"{document}:{number}: ({target})"
        if not os.path.realpath(resolved).startswith(os.path.realpath(root) + os.sep):
            problems.append(f"{where} leads outside the repository")
            continue
        if not os.path.exists(resolved):
            problems.append(f"{where} names {os.path.relpath(resolved, root)}, which does not exist")
            continue
        if not anchor:
            continue
        if not resolved.endswith(".md") or os.path.isdir(resolved):
            problems.append(f"{where} has an anchor into a file that is not Markdown")
            continue
        with open(resolved, encoding="utf-8") as f:
            if anchor not in anchors(f.read()):
                problems.append(f"{where}: {os.path.relpath(resolved, root)} has no heading with anchor #{anchor}")
    return problems


class SlugTest(unittest.TestCase):
    def test_github_anchor_rules(self):
        self.assertEqual(slug("The two commands"), "the-two-commands")
        self.assertEqual(slug("Numerics (`kernels/fp8.h`)"), "numerics-kernelsfp8h")
        self.assertEqual(slug("Launch and rendezvous: a process never trains"), "launch-and-rendezvous-a-process-never-trains")
        self.assertEqual(slug("zb-h1 and max_in_flight"), "zb-h1-and-max_in_flight")
        self.assertEqual(slug("See [plan](plan.md)"), "see-plan")

    def test_repeated_headings_are_numbered_and_code_is_no_heading(self):
        text = "# A\n## Notes\n```sh\n# not a heading\n```\n## Notes\n"
        self.assertEqual(anchors(text), {"a", "notes", "notes-1"})

    def test_links_in_code_are_not_links(self):
        text = "see [x](a.md) and `[y](b.md)`\n```\n[z](c.md)\n```\n"
        self.assertEqual([t for _, t in links(text)], ["a.md"])


class DocsTest(unittest.TestCase):
    def test_readme_is_a_map_of_at_most_300_lines(self):
        with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
            lines = f.read().rstrip("\n").split("\n")
        self.assertLessEqual(len(lines), README_MAX_LINES,
                             f"README.md has {len(lines)} lines; move the depth to docs/")

    def test_every_docs_page_is_linked_from_the_readme(self):
        with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
            targets = {os.path.normpath(t.partition("#")[0]) for _, t in links(f.read())}
        pages = [p for p in documents(ROOT) if p.startswith("docs" + os.sep)]
        self.assertTrue(pages, "docs/ holds no page")
        self.assertEqual([p for p in pages if p not in targets], [], "docs pages the README does not link")

    def test_every_link_and_anchor_resolves(self):
        problems = [p for document in documents(ROOT) for p in broken_links(ROOT, document)]
        self.assertEqual(problems, [], "\n" + "\n".join(problems))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    args, rest = parser.parse_known_args()
    ROOT = os.path.abspath(args.root)
    unittest.main(argv=[sys.argv[0], *rest])
