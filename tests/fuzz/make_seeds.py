#!/usr/bin/env python3
"""Writes the seed corpora of the partial, protocol and hdr fuzzers (tests/fuzz/corpus/partial/, corpus/protocol/,
corpus/hdr/) from the formats as partial.cpp (docs/design/farm.md §1 "Partial file"), protocol.cpp
(docs/design/runtime.md §6) and env_map.cpp (docs/design/tracer.md §6.1: Radiance RGBE) define them; the hdr
corpus's one OpenEXR seed is a small render's EXR (facetrace render --width 16 --height 12 --spp 2 --exr). The image seeds come from make_image_seeds.py; the scene and ONNX seeds are copies of repository files."""
import os, struct, sys, zlib

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
crc = lambda b: zlib.crc32(b) & 0xFFFFFFFF


# ---- partial files -------------------------------------------------------------------------------------------
def partial(width, height, K, spp, slots_units, capacity=4, scene_json=b'{"width":2}', build=b"facetrace 0.1 fuzz"):
    """slots_units: for each of the two header copies (sequence, [unit indices]) or None; blocks for every unit."""
    used = 208 + 48 * capacity + len(scene_json) + 4
    slot_bytes = (used + 4095) // 4096 * 4096
    pre = bytearray(4096)
    pre[0:8] = b"FTPART1\0"
    struct.pack_into("<II", pre, 8, 1, slot_bytes)
    struct.pack_into("<I", pre, 16, crc(bytes(pre[:16])))
    all_units = sorted({u for s in slots_units if s for u in s[1]})
    blocks = {u: struct.pack("<%df" % (width * height * 3), *[(u + 1) * 0.25 + i for i in range(width * height * 3)])
              for u in all_units}
    out = bytes(pre)
    for s in slots_units:
        b = bytearray(slot_bytes)
        if s:
            seq, units = s
            struct.pack_into("<QII", b, 0, seq, used, len(units))
            b[16:16 + len(build)] = build
            b[80:84] = b"fuzz"
            b[144:176] = bytes(range(32))
            struct.pack_into("<IIIIQI", b, 176, width, height, K, capacity, spp, len(scene_json))
            for i, u in enumerate(units):
                first = u * K
                n = min(K, spp - first)
                o = 208 + 48 * i
                struct.pack_into("<QQIB", b, o, u, first, n, 1 + u % 3)
                struct.pack_into("<QId", b, o + 24, 0, crc(blocks[u]), 0.5)
            b[208 + 48 * capacity:208 + 48 * capacity + len(scene_json)] = scene_json
            struct.pack_into("<I", b, used - 4, crc(bytes(b[:used - 4])))
        out += bytes(b)
    # blocks in table order of the newest copy
    newest = max((s for s in slots_units if s), key=lambda s: s[0])
    for u in newest[1]:
        out += blocks[u]
    return out


def protocol_records():
    """Records of protocol_fuzz.cpp: [u8 kind][u16 length][bytes]; an even kind is command kind/2 of its table."""
    idx = {"hello": 0, "ping": 1, "info": 2, "invoke": 3, "put_resident": 4, "drop_resident": 5, "ring_wait": 6,
           "ring_release": 7, "ring_stats": 8, "inject_fault": 9, "shutdown": 10, "reply": 11}
    rec = lambda cmd, payload=b"": struct.pack("<BH", 2 * idx[cmd], len(payload)) + payload
    raw = lambda datagram: struct.pack("<BH", 1, len(datagram)) + datagram
    rng = lambda off, size: struct.pack("<QQ", off, size)
    s = lambda text: struct.pack("<I", len(text)) + text
    ring, transfer = 2 << 20, 2 << 20
    invoke = lambda op, args=b"", inp=(0, 0), out=(0, 0): rec(
        "invoke", struct.pack("<I", op) + rng(*inp) + rng(*out) + struct.pack("<I", 1000) + s(args))
    ticket = lambda size_class, slot, gen, length: struct.pack("<QIIQ", size_class, slot, gen, length)
    ramp = struct.pack("<QQffII", 0, 64, 1.0, 0.5, 0, 0)
    header = lambda cmd, seq, payload: struct.pack("<IHHII", 0x50475446, 2, cmd, seq, len(payload)) + payload
    return {
        "ping_info_stats": rec("ping") + rec("info") + rec("ring_stats") + rec("shutdown"),
        "ramp_wait_release": invoke(1, ramp) + rec("ring_wait", ticket(4096, 0, 1, 256) + struct.pack("<I", 100)) +
                             rec("ring_release", ticket(4096, 0, 1, 256)) + rec("ring_stats"),
        "resident": rec("put_resident", s(b"weights") + rng(ring, 64)) + invoke(4, b"weights") +
                    rec("drop_resident", s(b"weights")) + invoke(4, b"weights"),
        "sum_floats": invoke(2, b"", (ring, 256)) + invoke(2, b"", (ring + transfer - 16, 64)),
        "inject_fault": rec("ping") + rec("inject_fault", b"\x02") + rec("ping"),
        "bad_commands": rec("hello") + rec("reply", s(b"") ) + rec("ping", b"\x00") + invoke(99),
        "raw_datagrams": raw(header(2, 7, b"")) + raw(header(3, 8, b"")) + raw(b"FTGP") + rec("ping"),
        "range_overflow": invoke(2, b"", (0xFFFFFFFFFFFFFF00, 0x200)) +
                          rec("put_resident", s(b"x") + rng(ring + transfer, 1)),
    }


# ---- Radiance RGBE pictures ------------------------------------------------------------------------------------
def rgbe(width, height, rows, extra=b""):
    """rows: the scanline bytes, already encoded (flat r g b e per texel, or runs)."""
    return b"#?RADIANCE\nFORMAT=32-bit_rle_rgbe\n" + extra + b"\n-Y %d +X %d\n" % (height, width) + b"".join(rows)


def rle_row(width, channels):
    """A new-style run-length row: channels = four lists of (count, value) runs (count > 0: a run; a list of
    bytes: literals)."""
    out = bytes([2, 2, width >> 8, width & 0xFF])
    for runs in channels:
        for r in runs:
            out += bytes([128 + r[0], r[1]]) if isinstance(r, tuple) else bytes([len(r)]) + bytes(r)
    return out


def hdr_seeds():
    flat = rgbe(2, 2, [bytes([128, 64, 32, 129, 0, 0, 0, 0]), bytes([255, 255, 255, 140, 1, 2, 3, 128])])
    runs = rgbe(8, 2, [rle_row(8, [[(8, 255)], [list(range(8))], [(4, 16), (4, 32)], [(8, 136)]]),
                       rle_row(8, [[(8, 1)], [(8, 1)], [(8, 1)], [(8, 137)]])], extra=b"EXPOSURE=2\n")
    wide = rgbe(200, 1, [rle_row(200, [[(127, 9), (73, 10)], [(127, 9), (73, 10)], [(127, 9), (73, 10)],
                                       [(127, 130), (73, 131)]])])
    return {"flat": flat, "runs": runs, "wide": wide, "truncated": runs[:-9]}


def main():
    os.makedirs(os.path.join(ROOT, "partial"), exist_ok=True)
    os.makedirs(os.path.join(ROOT, "protocol"), exist_ok=True)
    seeds = {
        "complete": partial(2, 2, 4, 8, [(1, [0]), (2, [0, 1])]),
        "one_copy": partial(3, 1, 2, 5, [(5, [0, 1, 2]), None]),
        "missing_unit": partial(2, 2, 4, 12, [(1, [1]), None]),
        "empty_table": partial(2, 2, 4, 8, [(1, []), None]),
        "big_table": partial(1, 1, 1, 3, [(9, [0, 1, 2]), (3, [0])], capacity=100),
    }
    for name, data in seeds.items():
        for flags in (0x00, 0x03, 0x07):
            with open(os.path.join(ROOT, "partial", f"{name}_f{flags:02x}.bin"), "wb") as f:
                f.write(bytes([flags]) + data)
    with open(os.path.join(ROOT, "partial", "truncated_f03.bin"), "wb") as f:
        f.write(b"\x03" + seeds["complete"][:-20])
    for name, data in protocol_records().items():
        with open(os.path.join(ROOT, "protocol", name + ".bin"), "wb") as f:
            f.write(data)
    os.makedirs(os.path.join(ROOT, "hdr"), exist_ok=True)
    for name, data in hdr_seeds().items():
        with open(os.path.join(ROOT, "hdr", name + ".hdr"), "wb") as f:
            f.write(data)
    print("partial, protocol and hdr seeds written under", ROOT)


if __name__ == "__main__":
    main()
