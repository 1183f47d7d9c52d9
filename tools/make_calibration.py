"""Rebuild grrr_stream/channels/calibration/pride_and_prejudice.txt from its source file.

Usage: python tools/make_calibration.py SOURCE_1342-0.txt OUT.txt
SOURCE is ``1342-0.txt`` of github.com/gutenbergbooks/1342 at commit
041e520899f9a02af517d6cb253bc1fdfbf923e2 (sha256 86dab871…d486d247, see the README next to
the output). Steps: drop the front matter (title pages, preface, list of illustrations)
up to the first sentence of chapter I; drop every bracketed ``[Illustration: …]`` block
(captions, not prose); squeeze runs of blank lines to one; stop before the first chapter
heading that would take the excerpt past 560,000 bytes.
"""

import re
import sys

LIMIT = 560_000


def drop_illustrations(text: str) -> str:
    out, i = [], 0
    while (j := text.find("[Illustration", i)) >= 0:
        out.append(text[i:j])
        depth, k = 0, j
        while True:  # the blocks nest one level ("[_Copyright 1894 ..._]]")
            depth += {"[": 1, "]": -1}.get(text[k], 0)
            k += 1
            if depth == 0:
                break
        i = k
    out.append(text[i:])
    return "".join(out)


def main(src: str, dst: str) -> None:
    text = open(src, encoding="utf-8").read().replace("\r\n", "\n")
    text = text[text.index("It is a truth universally acknowledged") :]
    text = drop_illustrations(text)
    text = re.sub(r"[ \t]+\n", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text)
    heads = [m.start() for m in re.finditer(r"\nCHAPTER [IVXL]+\.?\n", text)]
    cut = max(h for h in heads if len(text[:h].encode()) <= LIMIT)
    with open(dst, "w", encoding="utf-8", newline="\n") as f:
        f.write(text[:cut].strip("\n") + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:3])
