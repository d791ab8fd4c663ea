#!/usr/bin/env python3
"""Writes studio_small.hdr: a self-made 256x128 equirectangular studio environment (Radiance RGBE, flat
scanlines, standard -Y H +X W orientation), for scenes and tests that need an HDR map (docs/design/tracer.md §6.1).

Procedural, no inputs, so it is freely usable (the same terms as this repository). Directions: column x is the
azimuth phi = 360 deg * (x + 0.5) / W, row y (top first) the elevation 90 deg - 180 deg * (y + 0.5) / H. Linear
radiance per channel:
  - background 0.05 (grey) above the horizon; floor below it 0.15 * (1 - |elevation| / 90 deg), grey;
  - key softbox: azimuth 30-60 deg, elevation 20-50 deg: (8.0, 7.6, 7.0) (warm white);
  - fill softbox: azimuth 200-240 deg, elevation 10-40 deg: (3.0, 3.2, 3.6) (cool);
  - top light: elevation above 75 deg: (2.0, 2.0, 2.0).
Usage: make_studio_hdr.py [OUT] (default: studio_small.hdr beside this script).
"""
import math
import os
import sys

W, H = 256, 128


def radiance(az, el):
    if 30.0 <= az <= 60.0 and 20.0 <= el <= 50.0:
        return (8.0, 7.6, 7.0)
    if 200.0 <= az <= 240.0 and 10.0 <= el <= 40.0:
        return (3.0, 3.2, 3.6)
    if el > 75.0:
        return (2.0, 2.0, 2.0)
    if el < 0.0:
        g = 0.15 * (1.0 - abs(el) / 90.0)
        return (g, g, g)
    return (0.05, 0.05, 0.05)


def rgbe(r, g, b):
    v = max(r, g, b)
    if v < 1e-32:
        return bytes((0, 0, 0, 0))
    m, e = math.frexp(v)
    scale = m * 256.0 / v
    return bytes((int(r * scale), int(g * scale), int(b * scale), e + 128))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                             "studio_small.hdr")
    data = bytearray(b"#?RADIANCE\n# facetrace examples/maps/make_studio_hdr.py\nFORMAT=32-bit_rle_rgbe\n\n")
    data += ("-Y %d +X %d\n" % (H, W)).encode()
    for y in range(H):
        el = 90.0 - 180.0 * (y + 0.5) / H
        for x in range(W):
            az = 360.0 * (x + 0.5) / W
            data += rgbe(*radiance(az, el))
    with open(out, "wb") as f:
        f.write(data)


if __name__ == "__main__":
    main()
