"""np.load each .npz sample and touch its arrays: `acc_npz_load.py FILE...`.
numpy reads a zip member in BUFFER_SIZE (256 KiB) pieces through zipfile."""
import sys

import numpy as np

total = 0
for path in sys.argv[1:]:
    with np.load(path) as z:
        for name in z.files:
            total += int(z[name].size)
print("elements", total, flush=True)
