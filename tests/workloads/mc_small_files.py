"""A data set of many small files.

    mc_small_files.py make DIR N   create N files f00000.bin... of 512 + (37 i mod 1024) bytes
    mc_small_files.py read DIR     list DIR once, then os.stat, open, read whole and close
                                   each file once, in name order (what a naive
                                   map-style Dataset does per sample)
"""
import os
import sys


def size_of(i: int) -> int:
    return 512 + (37 * i) % 1024


def make(d: str, n: int) -> None:
    os.makedirs(d, exist_ok=True)
    for i in range(n):
        with open(os.path.join(d, f"f{i:05d}.bin"), "wb") as f:
            f.write(bytes([i % 251]) * size_of(i))


def read(d: str) -> None:
    total = 0
    for name in sorted(os.listdir(d)):
        path = os.path.join(d, name)
        os.stat(path)
        with open(path, "rb") as f:
            total += len(f.read())
    print(total, flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], int(sys.argv[3]))
    else:
        read(sys.argv[2])
