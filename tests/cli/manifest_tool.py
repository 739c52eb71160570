#!/usr/bin/env python3
# manifest_tool.py - reads and edits an image's manifest (docs/FORMAT.md 4) for the tests that need a
# chunk table listed or an image damaged on purpose (tests/cli/t5030-t5032, tests/gpu/t22). An edit
# rewrites the manifest's CRC-32C (FORMAT.md 4.10) and, where the subcommand says so, cpu-files.img's
# record of it (FORMAT.md 11.1), so that only the damage meant is left.
#
#   chunks DIR             one line per chunk: "index flags file_index file_offset stored_length codec
#                          alloc_id offset" (version 1 records are read as their own length)
#   set-codec DIR IDX C    sets chunk IDX's codec byte to C; the manifest's CRC only
#   flip-fp DIR            flips bit 0 of the first stored chunk's fp_lo; prints "INDEX ALLOC_ID OFFSET"
#   pid DIR N              sets the info's source_pid to N
#   parent-of DIR IMG      the parent record names IMG: its path's last component and its image id (the
#                          path must be as long as the old one)
#   parent-path DIR        prints the path the parent record holds, as recorded
#   flip-byte FILE OFF     flips bit 5 of FILE's byte at OFF (no CRC is fixed: that is the damage)
import os
import struct
import sys

SEC_INFO, SEC_STRINGS, SEC_CHUNKS, SEC_PARENT = 1, 2, 6, 8

_tbl = []
for _n in range(256):
    _c = _n
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _tbl.append(_c)


def crc32c(b):
    c = 0xFFFFFFFF
    for x in b:
        c = _tbl[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def sections(m):
    """(type, offset, length, entry size) of each section of the table"""
    tab, cnt, esz = struct.unpack_from("<QII", m, 24)
    for i in range(cnt):
        typ, _fl, off, ln, ent = struct.unpack_from("<IIQQI", m, tab + i * esz)
        yield typ, off, ln, ent


def section_offsets(m):
    return {typ: off for typ, off, _ln, _ent in sections(m)}


def load(d):
    return bytearray(open(d + "/manifest.img", "rb").read())


def save(d, m, cpu_files):
    mc = crc32c(m[:-4])
    struct.pack_into("<I", m, len(m) - 4, mc)
    with open(d + "/manifest.img", "wb") as f:
        f.write(m)
    if cpu_files:
        with open(d + "/cpu-files.img", "rb") as f:
            ls = bytearray(f.read())
        struct.pack_into("<I", ls, 40, mc)
        struct.pack_into("<I", ls, len(ls) - 4, crc32c(ls[:-4]))
        with open(d + "/cpu-files.img", "wb") as f:
            f.write(ls)


def cmd_chunks(d):
    m = open(d + "/manifest.img", "rb").read()
    ver, = struct.unpack_from("<I", m, 8)
    for typ, off, ln, ent in sections(m):
        if typ != SEC_CHUNKS:
            continue
        for k in range(ln // ent):
            r = off + k * ent
            aid, o, l, fo, fi, flags, crc = struct.unpack_from("<QQQQIII", m, r)
            stored, scrc, codec = (struct.unpack_from("<QIB", m, r + 48) if ver >= 2 else (l, crc, 0))
            print(k, flags, fi, fo, stored, codec, aid, o)


def cmd_set_codec(d, idx, codec):
    m = load(d)
    for typ, off, _ln, ent in sections(m):
        if typ == SEC_CHUNKS:
            m[off + int(idx) * ent + 60] = int(codec)
    save(d, m, cpu_files=False)


def cmd_flip_fp(d):
    m = load(d)
    flipped = None
    for typ, off, ln, ent in sections(m):
        if typ != SEC_CHUNKS:
            continue
        for k in range(ln // ent):
            aid, o, l, fo, fi, flags = struct.unpack_from("<QQQQII", m, off + k * ent)
            if not flags & 1:
                m[off + k * ent + 64] ^= 1
                flipped = (k, aid, o)
                break
    save(d, m, cpu_files=True)
    # said once the files are written: a caller reading the line may go on at once
    if flipped:
        print(*flipped, flush=True)


def cmd_pid(d, pid):
    m = load(d)
    struct.pack_into("<i", m, section_offsets(m)[SEC_INFO] + 12, int(pid))
    save(d, m, cpu_files=True)


def cmd_parent_of(d, other):
    m = load(d)
    sec = section_offsets(m)
    oid = open(other + "/manifest.img", "rb").read()[40:56]
    m[sec[SEC_PARENT]:sec[SEC_PARENT] + 16] = oid
    poff, plen = struct.unpack_from("<QQ", m, sec[SEC_PARENT] + 24)
    name = os.path.basename(other.rstrip("/")).encode()
    assert len(name) == plen, (name, plen)
    m[sec[SEC_STRINGS] + poff:sec[SEC_STRINGS] + poff + plen] = name
    save(d, m, cpu_files=True)


def cmd_parent_path(d):
    m = load(d)
    sec = section_offsets(m)
    poff, plen = struct.unpack_from("<QQ", m, sec[SEC_PARENT] + 24)
    print(bytes(m[sec[SEC_STRINGS] + poff:sec[SEC_STRINGS] + poff + plen]).decode())


def cmd_flip_byte(path, off):
    with open(path, "r+b") as f:
        o = int(off)
        f.seek(o)
        b = f.read(1)
        f.seek(o)
        f.write(bytes([b[0] ^ 0x20]))


COMMANDS = {
    "chunks": (cmd_chunks, 1),
    "set-codec": (cmd_set_codec, 3),
    "flip-fp": (cmd_flip_fp, 1),
    "pid": (cmd_pid, 2),
    "parent-of": (cmd_parent_of, 2),
    "parent-path": (cmd_parent_path, 1),
    "flip-byte": (cmd_flip_byte, 2),
}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS or len(sys.argv) - 2 != COMMANDS[sys.argv[1]][1]:
        sys.exit("usage: manifest_tool.py {%s} ARGS (see the file's head)" % ",".join(COMMANDS))
    COMMANDS[sys.argv[1]][0](*sys.argv[2:])
