"""Stage `download`: fetch every source of every split into data/raw, verified and line-aligned.

Output: train.{src,tgt} and val.{src,tgt} (each split's sources concatenated
in order), test/<name>.{src,tgt} (one pair per test set), and manifest.json:
per split and source its name, line count and files (URL or path, archive
member, sha256, how it was verified). UTF-8, LF, one sentence a line. The
directory is written atomically: it is either complete or left as it was.

A split lists names (data.train, data.val, data.test): catalog sets
(pipeline/data/catalog.yaml, every file's sum pinned) or the user's own
data.sources, whose formats pipeline/data/formats.py reads. An empty val or
test list is held out of train (pipeline/data/heldout.py). Fetching and the mirror:
pipeline/data/fetch.py; decoding: docs/corpus-decoding.md; sources: docs/corpora.md.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import click

from pipeline import files, lineage
from pipeline.data import artifacts, tags
from pipeline.data.heldout import heldout_record, hold_out
from pipeline.data.planning import plan_sources, tag_languages
from pipeline.data.reading import Reader, resolve_mirror
from pipeline.data.vocab import Vocab
from pipeline.params import DataParams
from pipeline.stages.options import load_params, params_option


def download(data: DataParams, out: Path, init_from: str | None = None) -> artifacts.Manifest:
    """Fetch, verify and decode every source `data` names; write `out` atomically; return the manifest.

    Source lines carry target-language tags where the train sources have several targets, or where
    the parent model `init_from` (train.init_from) has tags (planning.tag_languages).

    Streamed: each file goes a chunk at a time from its (decompressed) source to its split's file.
    A held-out draw needs the train split's length first, so train then goes to a scratch file
    and is split in a second pass (pipeline/data/heldout.py).
    """
    out = Path(out)
    mirror = resolve_mirror(data)
    plan = plan_sources(data)  # refuses bad names and sources before anything is fetched
    parent_tags = target_tags(init_from) if init_from is not None else []
    langs = tag_languages(plan, parent_tags, init_from)
    out.parent.mkdir(parents=True, exist_ok=True)
    # params.validate: a split with no sets has its held-out count, one with sets has none.
    held = {"val": data.heldout_val or 0, "test": data.heldout_test or 0}
    with (
        tempfile.TemporaryDirectory(prefix=f".{out.name}.fetch.", dir=out.parent) as scratch,
        files.atomic_path(out) as tmp,
    ):
        (tmp / "test").mkdir(parents=True)
        reader = Reader(Path(scratch), mirror, bool(langs))
        train_stem = Path(scratch) / "train" if any(held.values()) else tmp / "train"
        splits: dict[str, list[artifacts.CorpusRecord]] = {
            "train": reader.copy_split(plan["train"], train_stem)
        }
        splits["val"] = reader.copy_split(plan["val"], tmp / "val") if plan["val"] else []
        splits["test"] = [
            reader.copy_split([source], tmp / "test" / source.name)[0] for source in plan["test"]
        ]
        heldout = hold_out(data, held, train_stem, splits["train"], tmp) if any(held.values()) else None
        parts = heldout.pop("parts", {}) if heldout else {}
        for split in ("val", "test"):
            if held[split]:
                splits[split] = [heldout_record(held[split], parts.get(split))]
        manifest: artifacts.Manifest = {
            "src_lang": data.src_lang,
            "tgt_lang": data.tgt_lang,
            "splits": splits,
            "heldout": heldout,
        }
        if langs:  # only then: an untagged manifest stays as it was
            manifest["tags"] = [tags.tag(lang) for lang in langs]
        files.write_json(tmp / artifacts.MANIFEST, manifest)
    return manifest


def target_tags(init_from: str) -> list[str]:
    """The languages the parent's vocabulary has target-language tags for (<2ms>: ms), sorted; [] where
    it has none. A child keeps them: its source lines go behind its target's tag, as the parent's did."""
    lineage.model_dir(init_from)  # a model directory, or the one-line refusal
    return sorted(tags.tags_in(Vocab.load_parent(init_from).pieces("src")))


@click.command("download")
@params_option
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default="data/raw",
    show_default=True,
    help="Output directory: {train,val}.{src,tgt}, test/<name>.{src,tgt} and manifest.json.",
)
def command(params_file: Path, out: Path) -> None:
    """Fetch and verify every source the `data` params name into OUT."""
    params = load_params(params_file)
    manifest = download(params.data, out, params.train.init_from)
    counts = [
        f"{split} {sum(s['lines'] for s in manifest['splits'][split])}" for split in ("train", "val")
    ] + [f"test {s['name']} {s['lines']}" for s in manifest["splits"]["test"]]
    click.echo(f"wrote {out}: {', '.join(counts)} lines")
