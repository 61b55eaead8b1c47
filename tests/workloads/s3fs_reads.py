"""s3fs (fsspec over aiobotocore and aiohttp): what a loader reading a bucket does.

    python s3fs_reads.py --endpoint URL --prefix BUCKET/DIR [--ca FILE] [--out FILE]

Lists PREFIX once, then reads every object it found whole (cat_file: one GET
each), then the first 4 KiB of the first object (a ranged GET). Writes the
keys and the bytes each read returned to --out (JSON).
"""
from __future__ import annotations

import argparse
import json

import s3fs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--ca")
    ap.add_argument("--out")
    args = ap.parse_args()
    client_kwargs = {"endpoint_url": args.endpoint, "region_name": "us-east-1"}
    if args.ca:
        client_kwargs["verify"] = args.ca
    fs = s3fs.S3FileSystem(key="testing", secret="testing", client_kwargs=client_kwargs,
                           use_listings_cache=False)
    keys = sorted(fs.ls(args.prefix))
    reads = [[k, len(fs.cat_file(k))] for k in keys]
    head = len(fs.cat_file(keys[0], start=0, end=4096))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"keys": keys, "reads": reads, "ranged": head}, f)


if __name__ == "__main__":
    main()
