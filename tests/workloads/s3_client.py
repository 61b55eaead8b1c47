"""boto3 against an S3 endpoint: what a training job's object-storage loader does.

    python s3_client.py --endpoint URL --bucket B [--ca FILE] [--objects N]
                        [--size BYTES] [--ranges K] [--max-attempts A] [--epochs E]
                        [--lists L] [--out FILE]

PUTs N objects of known sizes (obj-00000 ... ; object i has size + i bytes),
GETs each whole (E times: one pass per epoch), then K ranged GETs of the first object (1 KiB each), then
LISTs the bucket L times (a page of 1000 keys each). It writes what it asked for and what
it got to --out (JSON): keys, sizes, the bytes each GET returned, and the
retries botocore made (its own count, from each response's metadata). The
requests table of a trace of this script must agree with that file.
"""
from __future__ import annotations

import argparse
import json

import boto3
from botocore.config import Config


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--bucket", required=True)
    ap.add_argument("--ca")
    ap.add_argument("--objects", type=int, default=20)
    ap.add_argument("--size", type=int, default=10_000)
    ap.add_argument("--ranges", type=int, default=5)
    ap.add_argument("--max-attempts", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--lists", type=int, default=1)
    ap.add_argument("--out")
    args = ap.parse_args()
    s3 = boto3.client("s3", endpoint_url=args.endpoint, verify=args.ca or True,
                      aws_access_key_id="testing", aws_secret_access_key="testing",
                      region_name="us-east-1",
                      config=Config(retries={"mode": "standard",
                                             "max_attempts": args.max_attempts},
                                    s3={"addressing_style": "path"}))
    done = {"puts": [], "gets": [], "ranged": [], "lists": [], "retries": 0}

    def retried(resp) -> None:
        done["retries"] += resp["ResponseMetadata"].get("RetryAttempts", 0)

    for i in range(args.objects):
        key = f"train/obj-{i:05d}"
        body = bytes([i % 251]) * (args.size + i)
        retried(s3.put_object(Bucket=args.bucket, Key=key, Body=body))
        done["puts"].append([key, len(body)])
    for _ in range(args.epochs):
        for key, size in done["puts"]:
            resp = s3.get_object(Bucket=args.bucket, Key=key)
            data = resp["Body"].read()
            retried(resp)
            done["gets"].append([key, len(data)])
    first = done["puts"][0][0]
    for k in range(args.ranges):
        resp = s3.get_object(Bucket=args.bucket, Key=first, Range=f"bytes={k * 1024}-{k * 1024 + 1023}")
        retried(resp)
        done["ranged"].append([first, len(resp["Body"].read())])
    for _ in range(args.lists):
        resp = s3.list_objects_v2(Bucket=args.bucket, Prefix="train/")
        retried(resp)
        done["lists"].append(resp.get("KeyCount", 0))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(done, f)


if __name__ == "__main__":
    main()
