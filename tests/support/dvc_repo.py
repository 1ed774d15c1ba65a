"""Stand-in score and decode stages and the dvc command, for conftest's DVC repositories."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# A stand-in score stage for conftest's dvc_repo: metrics.json as the score stage writes it, two test sets.
SCORE_STAGE = """\
import json, os, yaml
p = yaml.safe_load(open("params.yaml"))
layers, lr = p["model"]["n_layers"], p["train"]["lr"]
os.makedirs("reports/train", exist_ok=True)
bleu = round(20 + 3 * layers - 1000 * lr, 2)
json.dump({"val": {"bleu": bleu - 1, "chrf": 50.0, "ter": 60.0, "n_lines": 10, "ci95": {"bleu": [1, 2]}},
           "test": {"flickr": {"bleu": bleu, "chrf": 51.0, "ter": 59.5, "n_lines": 10},
                    "mscoco": {"bleu": bleu - 5, "chrf": 45.0, "ter": 65.0, "n_lines": 10}}},
          open("reports/metrics.json", "w"))
json.dump({"n_params": 1000 * layers, "train_seconds": 60.0 * layers, "tokens_per_s": 100.0 / layers},
          open("reports/train/summary.json", "w"))
"""


# A stand-in decode stage for conftest's decode_repo: hypotheses of val and of each test set in
# data/raw/test/ are the references with a share (decode.noise) of their words garbled, seeded by
# train.seed; metrics.json ({"val": ..., "test": {name: ...}}) records the references' sha256.
DECODE_STAGE = """\
import hashlib, json, os, random, yaml
p = yaml.safe_load(open("params.yaml"))
noise, seed = p["decode"]["noise"], p["train"]["seed"]
os.makedirs("data/decode/test", exist_ok=True)
os.makedirs("reports", exist_ok=True)
metrics = {"test": {}}
names = sorted(f[:-4] for f in os.listdir("data/raw/test") if f.endswith(".tgt"))
for stem in ["val", *(f"test/{n}" for n in names)]:
    raw = open(f"data/raw/{stem}.tgt", "rb").read()
    rng = random.Random(seed)
    refs = raw.decode("utf-8").splitlines()
    hyps = [" ".join("xyz" if rng.random() < noise else w for w in r.split()) for r in refs]
    open(f"data/decode/{stem}.hyp", "w", encoding="utf-8").write("".join(h + "\\n" for h in hyps))
    scores = {"n_lines": len(hyps), "refs_sha256": hashlib.sha256(raw).hexdigest()}
    if stem == "val":
        metrics["val"] = scores
    else:
        metrics["test"][stem[5:]] = scores
json.dump(metrics, open("reports/metrics.json", "w"))
"""

# decode_repo's sets: (key, lines).
DECODE_SETS = (("val", 60), ("test/flickr", 300), ("test/mscoco", 80))


def dvc(args: list[str], cwd: Path) -> str:
    env = {
        **os.environ,
        "DVC_NO_ANALYTICS": "1",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{args}: {done.stdout[-2000:]} {done.stderr[-2000:]}"
    return done.stdout
