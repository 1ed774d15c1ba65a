"""Stage `download`: fetch a parallel corpus into data/raw, verified and line-aligned.

Output: {train,val,test}.{src,tgt} (UTF-8, LF, one sentence a line, the two
sides of a split line-aligned) and manifest.json: for each output file where it
came from, its sha256, its line count, and how any held-out split was made.
The directory is written atomically: it is either complete or left as it was.

Sources (data.corpus): multi30k (the catalog's sets multi30k-train, -val and
-<data.multi30k_test> in pipeline/data/catalog.yaml, every file's sum pinned),
or bitext: a URL or local path per side and split, plain or gzip.
Fetching, the mirror and the decoding policy: pipeline/data/fetch.py and
docs/corpus-decoding.md, which also says how val and test are held out of a
corpus that has none.
"""

from __future__ import annotations

import os
import random
import re
import tempfile
from pathlib import Path
from typing import Any

import click

from pipeline import files
from pipeline.data import corpora
from pipeline.data.fetch import Source, fetch, verified_by
from pipeline.data.formats import text_lines as decode_lines
from pipeline.errors import UserError
from pipeline.params import DataParams, SideFiles
from pipeline.stages.options import load_params, params_option

SPLITS = ("train", "val", "test")
SIDES = ("src", "tgt")
HELDOUT_METHOD = (
    "training line i gets key r_i = the i-th draw of random.Random(seed).random(); the heldout_val "
    "lines with the smallest keys are val, the heldout_test lines with the next smallest are test; "
    "every split keeps corpus order"
)

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


# --- the stage -----------------------------------------------------------------


def download(data: DataParams, out: Path) -> dict[str, Any]:
    """Fetch, verify and decode the corpus `data` names; write `out` atomically; return the manifest."""
    out = Path(out)
    mirror = resolve_mirror(data)
    plan = plan_sources(data)  # refuses bad params before anything is fetched
    out.parent.mkdir(parents=True, exist_ok=True)
    pairs: dict[str, tuple[list[str], list[str]]] = {}
    records: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix=f".{out.name}.fetch.", dir=out.parent) as scratch:
        for split, sources in plan.items():
            if sources is None:
                continue
            sides = [_fetch_lines(s, Path(scratch), mirror) for s in sources]
            (src_lines, src_rec), (tgt_lines, tgt_rec) = sides
            _check_aligned(sources[0], len(src_lines), sources[1], len(tgt_lines))
            pairs[split] = (src_lines, tgt_lines)
            records[f"{split}.src"], records[f"{split}.tgt"] = src_rec, tgt_rec
    heldout = _hold_out(data, plan, pairs, records)
    manifest = _manifest(data, records, heldout)
    with files.atomic_path(out) as tmp:
        tmp.mkdir()
        for split in SPLITS:
            for side, lines in zip(SIDES, pairs[split]):
                files.write_lines(tmp / f"{split}.{side}", lines)
        files.write_json(tmp / "manifest.json", manifest)
    return manifest


def resolve_mirror(data: DataParams) -> Path | None:
    """The mirror root: env CORPUS_MIRROR if set, else data.mirror (relative to the cwd), else None."""
    root = os.environ.get("CORPUS_MIRROR") or data.mirror
    return Path(root) if root else None


def plan_sources(data: DataParams) -> dict[str, tuple[Source, Source] | None]:
    """Per split, its (src, tgt) sources, or None where the split is to be held out of train."""
    if data.corpus == "multi30k":
        return _plan_multi30k(data)
    return {split: _plan_bitext(getattr(data.bitext, split), split) for split in SPLITS}


def _plan_multi30k(data: DataParams) -> dict[str, tuple[Source, Source] | None]:
    """Multi30k's catalog sets multi30k-{train,val,<data.multi30k_test>}, oriented src -> tgt."""
    names = {"train": "train", "val": "val", "test": data.multi30k_test}
    sets = {split: corpora.lookup(f"multi30k-{name}") for split, name in names.items()}
    plan: dict[str, tuple[Source, Source] | None] = {}
    for split, named in sets.items():
        for key, lang in (("data.src_lang", data.src_lang), ("data.tgt_lang", data.tgt_lang)):
            if lang not in named.langs:
                raise UserError(
                    f"{key}: Multi30k set {named.name} has no language {lang!r}; it has "
                    f"{', '.join(named.langs)} (use corpus: bitext for other pairs)"
                )
        src, tgt = named.oriented(data.src_lang, data.tgt_lang).sides
        # No sum of its own: every catalog URL is in PINNED_SHA256, which fetch() checks.
        plan[split] = (Source(src.url, "data.src_lang", None), Source(tgt.url, "data.tgt_lang", None))
    return plan


def _plan_bitext(sides: SideFiles, split: str) -> tuple[Source, Source] | None:
    if sides.src is None or sides.tgt is None:
        return None  # params.validate allows this only for val and test
    key = f"data.bitext.{split}"
    return (
        Source(sides.src, f"{key}.src", _check_sha(sides.src_sha256, f"{key}.src_sha256")),
        Source(sides.tgt, f"{key}.tgt", _check_sha(sides.tgt_sha256, f"{key}.tgt_sha256")),
    )


def _check_sha(value: str | None, key: str) -> str | None:
    if value is None:
        return None
    value = value.strip().lower()
    if not _SHA256.match(value):
        raise UserError(f"{key}: {value!r} is not a sha256 (64 hex digits); fix it or set it to null")
    return value


# --- fetching ------------------------------------------------------------------


def _fetch_lines(source: Source, scratch: Path, mirror: Path | None) -> tuple[list[str], dict[str, Any]]:
    fetched = fetch(source, scratch, mirror)
    lines = decode_lines(fetched.path.read_bytes(), source.location)
    if fetched.via == "network":
        fetched.path.unlink()  # decoded: the scratch copy is no longer needed
    click.echo(f"{source.location}: {len(lines)} lines ({fetched.via})", err=True)
    record = {
        "source": source.location,
        "via": fetched.via,
        "sha256": fetched.sha256,
        "verified": verified_by(source),
        "lines": len(lines),
    }
    return lines, record


# --- decoding ------------------------------------------------------------------


def _check_aligned(src: Source, n_src: int, tgt: Source, n_tgt: int) -> None:
    if n_src != n_tgt:
        raise UserError(
            f"{src.location} has {n_src} lines but {tgt.location} has {n_tgt}; "
            "the two sides must be line-aligned: check that they belong together"
        )


# --- held-out splits and the manifest -------------------------------------------


def heldout_indices(n_lines: int, n_val: int, n_test: int, seed: int) -> tuple[list[int], list[int]]:
    """Line numbers (0-based, sorted) held out for val and test, by the method in the module docstring."""
    rng = random.Random(seed)
    keys = [rng.random() for _ in range(n_lines)]
    ranked = sorted(range(n_lines), key=keys.__getitem__)
    return sorted(ranked[:n_val]), sorted(ranked[n_val : n_val + n_test])


def _hold_out(
    data: DataParams,
    plan: dict[str, tuple[Source, Source] | None],
    pairs: dict[str, tuple[list[str], list[str]]],
    records: dict[str, dict[str, Any]],
) -> dict[str, Any] | None:
    """Split val/test off train where the plan has none; update `pairs` and `records` in place."""
    missing = [split for split in ("val", "test") if plan[split] is None]
    if not missing:
        return None
    sizes = {"val": data.heldout_val, "test": data.heldout_test}
    sizes = {split: (n if split in missing else 0) for split, n in sizes.items()}
    n_train, held = len(pairs["train"][0]), sizes["val"] + sizes["test"]
    if n_train - held < held:
        parts = " + ".join(f"{sizes[s]} (data.heldout_{s})" for s in missing)
        raise UserError(
            f"train has {n_train} lines, too few to hold out {parts} = {held} and keep at least as many "
            f"for training (needs {2 * held}); lower {' / '.join(f'data.heldout_{s}' for s in missing)}, "
            f"or give data.bitext.{missing[0]}"
        )
    val_idx, test_idx = heldout_indices(n_train, sizes["val"], sizes["test"], data.heldout_seed)
    taken = set(val_idx) | set(test_idx)
    src, tgt = pairs["train"]
    for split, idx in (("val", val_idx), ("test", test_idx)):
        if split in missing:
            pairs[split] = ([src[i] for i in idx], [tgt[i] for i in idx])
    keep = [i for i in range(n_train) if i not in taken]
    pairs["train"] = ([src[i] for i in keep], [tgt[i] for i in keep])
    for i, side in enumerate(SIDES):
        fetched = records[f"train.{side}"]  # source and sha256 are the fetched train file's
        records[f"train.{side}"] = {**fetched, "lines": len(pairs["train"][i]), "fetched_lines": n_train}
        for split in missing:
            records[f"{split}.{side}"] = {**fetched, "lines": len(pairs[split][i]), "heldout_from": "train"}
    sized = {split: sizes[split] for split in missing}
    return {"splits": missing, "seed": data.heldout_seed, **sized, "method": HELDOUT_METHOD}


def _manifest(
    data: DataParams, records: dict[str, dict[str, Any]], heldout: dict[str, Any] | None
) -> dict[str, Any]:
    return {
        "corpus": data.corpus,
        "src_lang": data.src_lang,
        "tgt_lang": data.tgt_lang,
        "files": {f"{split}.{side}": records[f"{split}.{side}"] for split in SPLITS for side in SIDES},
        "heldout": heldout,
    }


@click.command("download")
@params_option
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default="data/raw",
    show_default=True,
    help="Output directory: {train,val,test}.{src,tgt} and manifest.json.",
)
def command(params_file: Path, out: Path) -> None:
    """Fetch and verify the corpus named by the `data` params into OUT."""
    manifest = download(load_params(params_file).data, out)
    counts = ", ".join(f"{s} {manifest['files'][f'{s}.src']['lines']}" for s in SPLITS)
    click.echo(f"wrote {out}: {counts} lines")
