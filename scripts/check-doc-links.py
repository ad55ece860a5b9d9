#!/usr/bin/env python3
"""Check the relative links of Markdown files: the target file exists, and a #fragment
names a heading of the target page (GitHub's anchor slugs: lowercase, punctuation other
than '-' and '_' dropped, spaces to '-', duplicates suffixed -1, -2...). Usage:
scripts/check-doc-links.py ROOT FILE.md... (run by .ci/run on README.md and docs/)"""
import os, re, sys

def strip_code(text):
    # fenced code blocks hold no links or headings
    return re.sub(r'^(```|~~~).*?^\1\s*$', '', text, flags=re.S | re.M)

def slug(heading):
    h = heading.strip().lower()
    h = re.sub(r'<[^>]+>', '', h)              # inline HTML
    h = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', h)  # links: keep their text
    h = re.sub(r'[^\w\- ]', '', h)              # \w keeps letters, digits, _
    return h.replace(' ', '-')

def anchors(path):
    seen, out = {}, set()
    for line in strip_code(open(path, encoding='utf-8').read()).split('\n'):
        m = re.match(r'^(#{1,6})\s+(.*?)\s*#*\s*$', line)
        if not m:
            continue
        s = slug(m.group(2))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f'{s}-{n}')
    return out

def links(text):
    text = strip_code(text)
    text = re.sub(r'`[^`\n]*`', lambda m: ' ' * len(m.group(0)), text)  # code spans hold no links
    # [text](target), text may hold `code` and nested brackets one level deep
    for m in re.finditer(r'\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)\)', text):
        yield m.group(1), text.count('\n', 0, m.start()) + 1

def main():
    root, files = sys.argv[1], sys.argv[2:]
    bad = total = 0
    cache = {}
    for f in files:
        text = open(f, encoding='utf-8').read()
        for target, line in links(text):
            if re.match(r'^[a-z]+:', target):   # http:, https:, mailto:
                continue
            total += 1
            path, _, frag = target.partition('#')
            dest = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
            err = None
            if not os.path.abspath(dest).startswith(os.path.abspath(root) + os.sep):
                err = 'outside the repository'
            elif not os.path.exists(dest):
                err = 'no such file'
            elif frag:
                if not dest.endswith('.md'):
                    err = 'fragment on a non-Markdown file'
                else:
                    a = cache.setdefault(dest, anchors(dest))
                    if frag not in a:
                        err = f'no heading with anchor #{frag}'
            if err:
                bad += 1
                print(f'{f}:{line}: {target}: {err}')
    print(f'{total} relative links checked in {len(files)} files, {bad} broken')
    return 1 if bad else 0

sys.exit(main())
