"""The numpy view of the record ABI (abi.py) matches bpf/iotrace.h."""
from __future__ import annotations

import re

from conftest import ROOT

from iotrace import abi

HEADER = (ROOT / "bpf" / "iotrace.h").read_text()


def test_op_enum_matches_header():
    body = re.search(r"enum iot_op \{(.*?)\};", HEADER, re.S).group(1)
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    names = [n.strip().split("=")[0].strip() for n in body.split(",") if n.strip()]
    assert names[0] == "IOT_OP_NONE" and names[-1] == "IOT_OP_COUNT"
    assert len(names) - 1 == len(abi.OP_NAMES)
    special = {"IOT_OP_NONE": "none", "IOT_PROC_FORK": "proc_fork",
               "IOT_THREAD_NEW": "thread_new", "IOT_PROC_EXEC": "proc_exec",
               "IOT_THREAD_EXIT": "thread_exit", "IOT_PROC_EXIT": "proc_exit",
               "IOT_TASK_RENAME": "task_rename", "IOT_LOCK_CONTENTION": "lock_contention",
               "IOT_RPC": "rpc"}
    for c_name, py_name in zip(names, abi.OP_NAMES):
        assert special.get(c_name, c_name[4:].lower()) == py_name


def test_record_layout_matches_header():
    body = re.search(r"struct iot_event \{(.*?)\};", HEADER, re.S).group(1)
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    fields = re.findall(r"__([us])(\d+)\s+(\w+);", body)
    sizes = {"8": 1, "16": 2, "32": 4, "64": 8}
    assert [f[2] for f in fields] == list(abi.EVENT_DTYPE.names)
    for sign, bits, name in fields:
        dt = abi.EVENT_DTYPE[name]
        assert dt.itemsize == sizes[bits], name
        assert (dt.kind == "i") == (sign == "s"), name
    assert re.search(r"IOT_ABI_VERSION (\d+)", HEADER).group(1) == str(abi.ABI_VERSION)
