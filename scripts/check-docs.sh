#!/usr/bin/env bash
# Checks that the documentation holds together. Prints FILE:LINE: why for every problem and
# exits 1 when there is one, 0 when there is none; runs from any directory, offline.
#
#   (a) links: every relative link or image in a Markdown file ([text](target), and
#       [label]: target definitions) resolves to a file or folder of the repository. Links
#       with a scheme (https:, mailto:, ...) are not followed. An anchor (#part) is checked
#       too: against the target file's headings, turned into anchors as GitHub does
#       (lowercase, punctuation dropped, spaces to hyphens, -1, -2, ... for repeats), or its
#       explicit <a name/id> anchors. Fenced code blocks and `code spans` are skipped.
#   (b) issue numbers: no file outside docs/results/ cites a tracker issue by its number (the
#       word, an optional "#" and digits; also when split over two lines of a comment). The
#       dated results files are records of their time and may keep them. A line that uses
#       the word as a verb before a number can say so with "check-docs: allow" on it.
#   (c) outside documents: no file cites the design notes or reference notes kept outside the
#       repository (the patterns are in the table below). Everything a reader needs is in it.
#   (d) paths: every docs/... path to a .md, .csv, .raw or .png file named in any file's text
#       (comments, strings, prose) exists.
#
# "The repository" is what git lists: tracked files that still exist, plus untracked files that
# are not ignored (so that a change can be checked before it is committed). Outside a git
# work tree every file but build outputs counts. The script skips itself for (b) to (d).
#
# usage: scripts/check-docs.sh [-q]      (-q: print only the problems)
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
PYTHON=/usr/bin/python3
[ -x "$PYTHON" ] || PYTHON=$(command -v python3) || { echo "check-docs: python3 is required" >&2; exit 2; }
exec "$PYTHON" - "$@" <<'PY'
import os, re, subprocess, sys, unicodedata
from urllib.parse import unquote

quiet = "-q" in sys.argv[1:]
SELF = "scripts/check-docs.sh"


def repo_files():
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             check=True, capture_output=True).stdout
        names = [n.decode("utf-8", "surrogateescape") for n in out.split(b"\0") if n]
    except (OSError, subprocess.CalledProcessError):
        names = []
        skip = re.compile(r"^(\.git|build[^/]*|out|__pycache__)$")
        for root, dirs, files in os.walk("."):
            dirs[:] = [d for d in dirs if not skip.match(d)]
            for f in files:
                names.append(os.path.normpath(os.path.join(root, f)))
    return sorted({n for n in names if os.path.isfile(n)})


FILES = repo_files()
FILESET = set(FILES)
DIRS = set()
for f in FILES:
    d = os.path.dirname(f)
    while d:
        DIRS.add(d)
        d = os.path.dirname(d)

problems = []


def report(path, line, why):
    problems.append(f"{path}:{line}: {why}")


def read_text(path):
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    if b"\0" in data[:8192]:
        return None
    return data.decode("utf-8", "replace")


TEXTS = {}
for f in FILES:
    t = read_text(f)
    if t is not None:
        TEXTS[f] = t

# ---- Markdown structure: code fences, code spans, headings, anchors ------------------------

FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")


def prose_lines(text):
    """(line number, line) of a Markdown text outside fenced code blocks, code spans blanked."""
    fence = None
    for no, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            continue
        if m:
            fence = m.group(1)
            continue
        yield no, re.sub(r"(`+)(.+?)\1", lambda s: " " * len(s.group(0)), line)


def slug(heading):
    h = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)   # [text](url) -> text
    h = re.sub(r"<[^>]+>", "", h)                              # inline HTML
    h = h.strip().lower()
    out = []
    for ch in h:
        cat = unicodedata.category(ch)
        if ch in "-_" or cat[0] in "LN" or cat == "Mn":
            out.append(ch)
        elif ch == " ":
            out.append("-")
    return "".join(out)


ANCHOR_CACHE = {}


def anchors(path):
    if path not in ANCHOR_CACHE:
        seen, names = {}, set()
        text = TEXTS.get(path, "")
        fence = None
        for line in text.split("\n"):
            m = FENCE.match(line)
            if fence:
                if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                    fence = None
                continue
            if m:
                fence = m.group(1)
                continue
            h = re.match(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
            if h:
                base = slug(h.group(1))
                n = seen.get(base, 0)
                names.add(base if n == 0 else f"{base}-{n}")
                seen[base] = n + 1
            for a in re.finditer(r"<a\s[^>]*(?:name|id)=\"([^\"]+)\"", line):
                names.add(a.group(1))
        ANCHOR_CACHE[path] = names
    return ANCHOR_CACHE[path]


# ---- (a) relative links in Markdown files --------------------------------------------------

INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
REFDEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def check_link(md, no, target):
    target = target.strip("<>")
    if not target or SCHEME.match(target):
        return
    path, _, frag = target.partition("#")
    path = unquote(path.split("?", 1)[0])
    if path:
        base = "." if path.startswith("/") else os.path.dirname(md)
        resolved = os.path.normpath(os.path.join(base, path.lstrip("/")))
        if resolved.startswith(".."):
            report(md, no, f"link {target} leaves the repository")
            return
        if resolved not in FILESET and resolved not in DIRS:
            report(md, no, f"link {target}: no file {resolved} in the repository")
            return
    else:
        resolved = md
    if frag and resolved.endswith(".md") and resolved in FILESET:
        if unquote(frag) not in anchors(resolved):
            report(md, no, f"link {target}: {resolved} has no heading or anchor #{frag}")


for md in FILES:
    if not md.endswith(".md") or md not in TEXTS:
        continue
    for no, line in prose_lines(TEXTS[md]):
        for m in INLINE.finditer(line):
            check_link(md, no, m.group(1))
        m = REFDEF.match(line)
        if m:
            check_link(md, no, m.group(1))

# ---- (b) issue numbers, (c) outside documents, (d) docs/ paths -----------------------------

ISSUE = re.compile(r"\bissues?[ \t]*#?[0-9]+\b", re.I)
OUTSIDE = [
    (re.compile(r"\bDESIGN\.md\b"), "cites DESIGN.md, a document outside the repository"),
    (re.compile(r"\bDESIGN (§|section)"), "cites a section of DESIGN.md, a document outside the repository"),
    (re.compile(r"(?<![\w.-])reference/[\w.-]+\.md\b"), "cites a reference/ note outside the repository"),
    (re.compile(r"/work/shared\b"), "cites /work/shared, outside the repository"),
    (re.compile(r"\.\./shared\b"), "cites ../shared, outside the repository"),
]
DOCPATH = re.compile(r"(?<![\w/.-])docs/[\w./-]*?\.(?:md|csv|raw|png)\b")
LEAD = re.compile(r"^\s*(?:#+|//+|/?\*+|--|;+|>+|\"\"\"|''')?\s*")
ALLOW = "check-docs: allow"

for f in FILES:
    if f == SELF or f not in TEXTS:
        continue
    lines = TEXTS[f].split("\n")
    if not f.startswith("docs/results/"):
        # Join the lines (comment markers dropped) so that a citation wrapped over two lines is
        # found too; a match is reported at the line where it starts.
        joined, starts = [], []
        pos = 0
        for line in lines:
            part = LEAD.sub("", line, count=1) if joined else line
            starts.append(pos)
            joined.append(part)
            pos += len(part) + 1
        text = " ".join(joined)
        for m in ISSUE.finditer(text):
            no = max(i for i, s in enumerate(starts) if s <= m.start()) + 1
            last = max(i for i, s in enumerate(starts) if s <= m.end() - 1) + 1
            if any(ALLOW in lines[k - 1] for k in range(no, last + 1)):
                continue
            report(f, no, f'cites an issue number: "{m.group(0)}"')
    for no, line in enumerate(lines, 1):
        for rx, why in OUTSIDE:
            if rx.search(line):
                report(f, no, why)
        for m in DOCPATH.finditer(line):
            p = m.group(0).rstrip(".")
            if p not in FILESET:
                report(f, no, f"names {p}, which is not in the repository")

for p in problems:
    print(p)
if not quiet:
    print(f"check-docs: {len(FILES)} files, {sum(1 for f in FILES if f.endswith('.md'))} Markdown; "
          f"{len(problems)} problem(s)")
sys.exit(1 if problems else 0)
PY
