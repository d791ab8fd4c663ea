#!/usr/bin/env python3
"""Writes the image fuzzer's seed corpus (tests/fuzz/corpus/image/): tiny PNGs of every colour type and bit depth,
interlaced and not, with tRNS and eXIf, and tiny JPEGs from cjpeg (libjpeg-turbo-progs): baseline, progressive,
grey, RGB, arithmetic, restart markers, each with an EXIF APP1 orientation (little- and big-endian TIFF)."""
import os, struct, subprocess, sys, tempfile, zlib

W, H = 7, 5
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus", "image")


def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def exif_tiff(orientation, big):
    e = ">" if big else "<"
    head = (b"MM" if big else b"II") + struct.pack(e + "HI", 42, 8)
    ifd = struct.pack(e + "H", 1) + struct.pack(e + "HHIHH", 0x0112, 3, 1, orientation, 0) + struct.pack(e + "I", 0)
    return head + ifd


def sample(x, y, c, depth):
    v = (x * 37 + y * 91 + c * 53) % 256
    return v if depth == 8 else (v * 257 if depth == 16 else v >> (8 - depth))


def rows(colour, depth, width, height, x0=0, y0=0, dx=1, dy=1):
    chans = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[colour]
    out = b""
    for j in range(height):
        y = y0 + j * dy
        vals = [sample(x0 + i * dx, y, c, depth) for i in range(width) for c in range(chans)]
        if depth == 16:
            row = b"".join(struct.pack(">H", v) for v in vals)
        elif depth == 8:
            row = bytes(vals)
        else:
            bits, acc, n = bytearray(), 0, 0
            for v in vals:
                acc = (acc << depth) | (v & ((1 << depth) - 1)); n += depth
                if n == 8: bits.append(acc); acc, n = 0, 0
            if n: bits.append(acc << (8 - n))
            row = bytes(bits)
        out += b"\0" + row
    return out


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]


def png(colour, depth, interlace=False, trns=False, exif=None):
    ihdr = struct.pack(">IIBBBBB", W, H, depth, colour, 0, 0, 1 if interlace else 0)
    body = chunk(b"IHDR", ihdr)
    if colour == 3:
        body += chunk(b"PLTE", bytes((i * 40) % 256 for i in range(3 * (1 << depth))))
    if trns:
        body += chunk(b"tRNS", bytes([0, 255, 128]) if colour == 3 else struct.pack(">H", 3) * (3 if colour == 2 else 1))
    if exif is not None:
        body += chunk(b"eXIf", exif_tiff(exif, big=False))
    if interlace:
        raw = b""
        for x0, y0, dx, dy in ADAM7:
            w, h = (W - x0 + dx - 1) // dx, (H - y0 + dy - 1) // dy
            if w > 0 and h > 0:
                raw += rows(colour, depth, w, h, x0, y0, dx, dy)
    else:
        raw = rows(colour, depth, W, H)
    body += chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")
    return b"\x89PNG\r\n\x1a\n" + body


def with_app1(jpeg, orientation, big):
    app1 = b"Exif\0\0" + exif_tiff(orientation, big)
    return jpeg[:2] + b"\xff\xe1" + struct.pack(">H", len(app1) + 2) + app1 + jpeg[2:]


def main():
    os.makedirs(OUT, exist_ok=True)
    files = {}
    for colour, depths in {0: [1, 2, 4, 8, 16], 2: [8, 16], 3: [1, 2, 4, 8], 4: [8, 16], 6: [8, 16]}.items():
        for d in depths:
            files[f"png_c{colour}_d{d}.png"] = png(colour, d)
    files["png_c2_d8_interlaced.png"] = png(2, 8, interlace=True)
    files["png_c3_d4_interlaced.png"] = png(3, 4, interlace=True)
    files["png_c3_d8_trns.png"] = png(3, 8, trns=True)
    files["png_c2_d8_trns.png"] = png(2, 8, trns=True)
    files["png_c0_d8_trns.png"] = png(0, 8, trns=True)
    for o in (3, 6, 8):
        files[f"png_c2_d8_exif{o}.png"] = png(2, 8, exif=o)
    with tempfile.TemporaryDirectory() as tmp:
        ppm = os.path.join(tmp, "in.ppm")
        with open(ppm, "wb") as f:
            f.write(b"P6\n%d %d\n255\n" % (W * 2, H * 2) +
                    bytes(sample(x, y, c, 8) for y in range(H * 2) for x in range(W * 2) for c in range(3)))
        variants = {"baseline": [], "progressive": ["-progressive"], "grey": ["-grayscale"], "rgb": ["-rgb"],
                    "arithmetic": ["-arithmetic"], "restart": ["-restart", "1B"], "h1v1": ["-sample", "1x1"],
                    "optimize": ["-optimize", "-quality", "50"]}
        for name, args in variants.items():
            jpeg = subprocess.run(["cjpeg", *args, ppm], check=True, capture_output=True).stdout
            files[f"jpeg_{name}.jpg"] = jpeg
        base = files["jpeg_baseline.jpg"]
        files["jpeg_exif6_le.jpg"] = with_app1(base, 6, big=False)
        files["jpeg_exif8_be.jpg"] = with_app1(base, 8, big=True)
        files["jpeg_progressive_exif3.jpg"] = with_app1(files["jpeg_progressive.jpg"], 3, big=True)
    for name, data in files.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
    print(f"{len(files)} seeds in {OUT}")


if __name__ == "__main__":
    main()
