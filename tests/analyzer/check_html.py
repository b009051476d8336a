#!/usr/bin/python3
"""The HTML report in a real browser: a generated 3-D job whose root is global rank 20 is
analyzed with --html, then Debian's headless chromium renders the page: the DOM it built names the
culprit and draws its bars in the culprit class, and the screenshot really has the culprit's red
on it (pixels decoded here, PNG through zlib). Skipped (77) where chromium is not installed.

usage: check_html.py GEN_DUMPS ANALYZER
"""
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

RED = (0xDD, 0x00, 0x00)  # svg .culprit rect.done{fill:#d00}


def png_pixels(path):
    """(width, height, rows of RGB tuples) of an 8-bit RGB or RGBA PNG."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, w = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and ctype in (2, 6), "unexpected PNG format %d/%d" % (depth, ctype)
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw, stride, rows, prev = zlib.decompress(idat), w * bpp, [], bytearray(w * bpp)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return w, h, [[tuple(r[x * bpp:x * bpp + 3]) for x in range(w)] for r in rows]


def main():
    gen, az = sys.argv[1:3]
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        print("check_html.py: chromium is not installed (Debian package chromium); skipped")
        return 77
    tmp = tempfile.mkdtemp(prefix="wd-html.")
    try:
        dumps, page, shot = os.path.join(tmp, "dumps"), os.path.join(tmp, "r.html"), os.path.join(tmp, "r.png")
        subprocess.run([gen, dumps, "--layout=2x4x4", "--scenario=job-root", "--ring=64"], check=True)
        subprocess.run([az, "-q", "--html=" + page, dumps], check=True, stdout=subprocess.DEVNULL)
        html = open(page).read()
        assert "http://" not in html and "https://" not in html and "<script" not in html, \
            "the page is not self-contained"
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                 "--user-data-dir=" + os.path.join(tmp, "profile")]
        dom = subprocess.run([chromium] + flags + ["--dump-dom", "file://" + page], check=True,
                             capture_output=True, text=True, timeout=120).stdout
        culprit = dom.split('id="culprit"', 1)[1].split("</p>", 1)[0] if 'id="culprit"' in dom else ""
        assert "global rank 20 on host node002" in culprit, "culprit element: %r" % culprit[:300]
        assert dom.count('<g class="culprit">') >= 1, "no bar drawn in the culprit class"
        subprocess.run([chromium] + flags + ["--screenshot=" + shot, "--window-size=1100,1600",
                                             "file://" + page], check=True, capture_output=True,
                       timeout=120)
        w, h, px = png_pixels(shot)
        red = sum(1 for row in px for p in row if all(abs(p[i] - RED[i]) <= 8 for i in range(3)))
        assert red > 200, "the screenshot (%dx%d) shows %d culprit-red pixels" % (w, h, red)
        print("check_html.py: ok (%d culprit-red pixels in a %dx%d screenshot)" % (red, w, h))
        return 0
    except AssertionError as e:
        print("check_html.py: FAILED: %s (files in %s)" % (e, tmp))
        tmp = None
        return 1
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
