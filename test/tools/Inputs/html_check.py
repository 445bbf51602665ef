#!/usr/bin/env python3
"""What `hetplan explain PLAN --html OUT` wrote, in lines FileCheck can match.

  html_check.py REPORT.html [--dom]

Parses the page with html.parser (or, with --dom, the DOM Chromium dumped:
the same checks on what the browser built) and prints:

  sections: summary cluster ...        the <section id=...> in order
  devices: N [types]                   devices in the devices table (a row
                                       stands for data-ranks alike ranks)
  stages: N                            rows of the stages table (training)
  replicas: N                          rows of the replicas table (serving)
  membars: N for R ranks               memory bars (SVG; a row of alike ranks
                                       has one) and the ranks they stand for
  timeline: svg rects=N                the embedded timeline's boxes
  external: none | what                anything that would load from elsewhere
  balanced: yes | the first mismatch   tags nest (void elements aside)
"""
import html.parser
import re
import sys

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.mismatch = [], None
        self.sections, self.rows, self.ranks, self.svgs = [], {}, {}, {}
        self.timeline_rects = 0
        self.device_types = []
        self._cell = None
        self._table = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "section":
            self.sections.append(a.get("id", "?"))
        if tag == "table":
            self._table = a.get("id")
        if tag == "tr" and a.get("class"):
            key = f"{self._table}:{a['class']}"
            self.rows[key] = self.rows.get(key, 0) + 1
            self.ranks[key] = self.ranks.get(key, 0) + int(a.get("data-ranks", 1))
            if self._table == "devices":
                self._cell = 0
        elif tag == "td" and self._cell is not None:
            self._cell += 1
        if tag == "svg":
            cls = a.get("class") or a.get("id") or "timeline"
            self.svgs[cls] = self.svgs.get(cls, 0) + 1
        if tag == "rect" and "timeline" in self.sections[-1:] and "svg" in self.stack:
            self.timeline_rects += 1
        if tag not in VOID and not tag.startswith("!"):
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in VOID and self.stack and self.stack[-1] == tag:
            self.stack.pop()

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if tag == "table":
            self._table, self._cell = None, None
        if not self.stack or self.stack[-1] != tag:
            if self.mismatch is None:
                self.mismatch = f"</{tag}> closes <{self.stack[-1] if self.stack else ''}>"
            return
        self.stack.pop()

    def handle_data(self, data):
        if self._cell == 2 and data.strip():
            self.device_types.append(data.strip())
            self._cell = 99


def external(text):
    """Everything in the page that could make a browser fetch something."""
    found = []
    for rx in [r"https?://", r"\bsrc\s*=", r"<script", r"<link\b", r"url\(", r"@import",
               r"<iframe", r"<img", r"<object", r"<embed", r"href\s*=\s*\"(?!#)"]:
        if re.search(rx, text, re.I):
            found.append(rx)
    return found


def main():
    path = sys.argv[1]
    text = open(path, encoding="utf-8").read()
    page = Page()
    page.feed(text)
    page.close()
    print("sections:", " ".join(page.sections))
    print(f"devices: {page.ranks.get('devices:device', 0)} "
          f"[{', '.join(sorted(set(page.device_types)))}]")
    print(f"stages: {page.rows.get('stages:stage', 0)}")
    print(f"replicas: {page.rows.get('replicas:replica', 0)}")
    memory_ranks = page.ranks.get("memory-table:rank", 0) + page.ranks.get("serving-memory:rank", 0)
    print(f"membars: {page.svgs.get('membar', 0)} for {memory_ranks} ranks")
    timeline = "timeline" in page.sections and page.timeline_rects > 0
    print(f"timeline: {'svg rects=' + str(page.timeline_rects) if timeline else 'none'}")
    ext = external(text)
    print("external:", ", ".join(ext) if ext else "none")
    if "--dom" not in sys.argv:  # Chromium's dump closes what it opened itself
        print("balanced:", page.mismatch or ("yes" if not page.stack else f"open {page.stack}"))


if __name__ == "__main__":
    main()
