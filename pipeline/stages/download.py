"""Stage `download`: fetch a parallel corpus into data/raw, verified and line-aligned.

Output: {train,val,test}.{src,tgt} (UTF-8, LF, one sentence a line, the two
sides of a split line-aligned) and manifest.json, which records for each
output file where it came from, the sha256 of the fetched file, its line
count, and how any held-out split was made. The directory is written
atomically: it is either complete or left as it was.

Sources (data.corpus):
- multi30k: Multi30k task 1 (train, val, data.multi30k_test), from MULTI30K_URL.
  Every file's sha256 is pinned in PINNED_SHA256; a test set without a pinned
  sum is refused.
- bitext: any URL (http/https) or local path per side and split, plain text or
  gzip (detected by its magic bytes, not its suffix). A file is verified against
  its src_sha256/tgt_sha256 when given, and against PINNED_SHA256 when its URL is
  there; otherwise its computed sum is recorded in the manifest.

Mirror: CORPUS_MIRROR (env, takes precedence) or data.mirror names a folder
that holds https://HOST/PATH at MIRROR/HOST/PATH. A file found there is read
from there; else it is fetched from the network (RETRY_DELAYS between tries),
into a temporary file renamed only once it is complete.

Decoding policy (the same for every file): the bytes must be valid UTF-8, else
the error names the file and the 1-based line. A leading UTF-8 BOM is dropped.
CRLF becomes LF; CR is taken as a line ending only in a file that has no LF at
all (old Mac files): elsewhere a stray CR is a character inside a line, left
for `clean`, so that it cannot split one line in two and break alignment.
Lines are split on LF only, never with str.splitlines(), which also splits on
U+001C-U+001E, U+0085, U+2028 and U+2029. A final LF ends the last line and
does not start another. A file with no lines is an error, as are two sides of
a split with different line counts. Nothing else is changed: normalization is
`clean`'s job.

Held-out splits: when data.bitext.val and/or .test is null, they are held out
of train. Training line i gets the key r_i, the i-th number drawn from
random.Random(data.heldout_seed).random() (whose sequence for an int seed
Python guarantees across versions); the data.heldout_val lines with the
smallest keys become val, the data.heldout_test lines with the next smallest
become test, and the rest stay train. Each split keeps the corpus order.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import os
import random
import re
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import click

from pipeline import files
from pipeline.errors import UserError
from pipeline.params import DataParams, SideFiles
from pipeline.stage import load_params, params_option

SPLITS = ("train", "val", "test")
SIDES = ("src", "tgt")

MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/{split}.{lang}.gz"
MULTI30K_LANGS = ("de", "en", "fr", "cs")
MULTI30K_TESTS = ("test_2016_flickr",)  # the test sets whose sums are pinned below

_M30K = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"
_OPUS = "https://raw.githubusercontent.com/Helsinki-NLP/OPUS-MT-testsets/master/testsets/"
_TATOEBA = _OPUS + "eng-rus/tatoeba-test-v2021-08-07"
_TICO = _OPUS + "en-ms/tico19-test"

# sha256 of every file this project knows by URL (from the corpus mirror's SHA256SUMS).
PINNED_SHA256: dict[str, str] = {
    _M30K + "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    _M30K + "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    _M30K + "train.fr.gz": "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c",
    _M30K + "train.cs.gz": "a65adb8b32e3bc664f21ecba7a6e7f6950fd1f405e135f7c312faabdb6255077",
    _M30K + "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    _M30K + "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    _M30K + "val.fr.gz": "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9",
    _M30K + "val.cs.gz": "b63226e05c4bd5dd6a42897d74b86a1b9d2c31498252c572b1ea7f7996927fcc",
    _M30K + "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    _M30K + "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    _M30K + "test_2016_flickr.fr.gz": "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90",
    _M30K + "test_2016_flickr.cs.gz": "200a4a74cc9560f051924abb9803be008d1908d77f747e9141aeb86dfd2797f1",
    _TATOEBA + ".eng": "3d89c0281402c08dd6f8158301bf44586997b7f76070269c9ee4097c4f10fcb2",
    _TATOEBA + ".rus": "643d0d8beedac2add8b8a6523bacdbbb349e438e0139eb5ef9b4cc0f63660cd5",
    _TICO + ".en": "d7369430ce903e5d40f28403686fb81239918f568c35c6b057a32d4c8db81f5f",
    _TICO + ".ms": "2f8707cc2f06f3a9e8b433c4a7dad9c95ae3c7178239aafc0e07a003b7fa0d92",
}

# Ready-made `data:` sections for two more pairs (both are small test sets, used here
# as training data only to run the pipeline on another pair and script, not as benchmarks).
# TICO-19 has 2,100 lines, too few to hold out the default 1,000 + 1,000.
EXAMPLE_CONFIGS: dict[str, str] = {
    "tatoeba-ru-en": f"""\
data:
  corpus: bitext
  src_lang: ru
  tgt_lang: en
  bitext:
    train:
      src: {_TATOEBA}.rus
      tgt: {_TATOEBA}.eng
      src_sha256: null
      tgt_sha256: null
    val: {{src: null, tgt: null, src_sha256: null, tgt_sha256: null}}
    test: {{src: null, tgt: null, src_sha256: null, tgt_sha256: null}}
  heldout_val: 1000
  heldout_test: 1000
""",
    "tico19-en-ms": f"""\
data:
  corpus: bitext
  src_lang: en
  tgt_lang: ms
  bitext:
    train:
      src: {_TICO}.en
      tgt: {_TICO}.ms
      src_sha256: null
      tgt_sha256: null
    val: {{src: null, tgt: null, src_sha256: null, tgt_sha256: null}}
    test: {{src: null, tgt: null, src_sha256: null, tgt_sha256: null}}
  heldout_val: 300
  heldout_test: 500
""",
}

HELDOUT_METHOD = (
    "training line i gets key r_i = the i-th draw of random.Random(seed).random(); the heldout_val "
    "lines with the smallest keys are val, the heldout_test lines with the next smallest are test; "
    "every split keeps corpus order"
)

RETRY_DELAYS = (1.0, 2.0, 4.0)  # seconds slept after failed tries 1, 2, 3: four tries in all
_sleep: Callable[[float], None] = time.sleep  # tests patch this so that retries do not wait
_CHUNK = 1 << 20
_TIMEOUT_S = 60
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_MIRROR_HELP = (
    "with no network, set the environment variable CORPUS_MIRROR (or data.mirror) "
    "to an offline mirror root that holds https://HOST/PATH at MIRROR/HOST/PATH"
)


@dataclass(frozen=True)
class Source:
    """One file to fetch: where it is, the param that named it, the sha256 it must have."""

    location: str  # a URL or a local path, as the user gave it
    key: str  # e.g. data.bitext.train.src, for messages
    sha256: Optional[str]


@dataclass(frozen=True)
class Fetched:
    """A fetched file: where its bytes are now, how they got there, their sha256."""

    path: Path
    via: str  # mirror | network | local
    sha256: str


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


def resolve_mirror(data: DataParams) -> Optional[Path]:
    """The mirror root: env CORPUS_MIRROR if set, else data.mirror (relative to the cwd), else None."""
    root = os.environ.get("CORPUS_MIRROR") or data.mirror
    return Path(root) if root else None


def plan_sources(data: DataParams) -> dict[str, Optional[tuple[Source, Source]]]:
    """Per split, its (src, tgt) sources, or None where the split is to be held out of train."""
    if data.corpus == "multi30k":
        return _plan_multi30k(data)
    return {split: _plan_bitext(getattr(data.bitext, split), split) for split in SPLITS}


def _plan_multi30k(data: DataParams) -> dict[str, Optional[tuple[Source, Source]]]:
    for key, lang in (("data.src_lang", data.src_lang), ("data.tgt_lang", data.tgt_lang)):
        if lang not in MULTI30K_LANGS:
            raise UserError(
                f"{key}: Multi30k has no language {lang!r}; it has {', '.join(MULTI30K_LANGS)} "
                "(use corpus: bitext for other pairs)"
            )
    if data.multi30k_test not in MULTI30K_TESTS:
        raise UserError(
            f"data.multi30k_test: {data.multi30k_test} has no pinned sha256, so it cannot be verified; "
            f"supported: {', '.join(MULTI30K_TESTS)}"
        )
    names = {"train": "train", "val": "val", "test": data.multi30k_test}
    plan: dict[str, Optional[tuple[Source, Source]]] = {}
    for split, name in names.items():
        urls = [MULTI30K_URL.format(split=name, lang=lang) for lang in (data.src_lang, data.tgt_lang)]
        # No sum of its own: every Multi30k URL is in PINNED_SHA256, which fetch() checks.
        plan[split] = (Source(urls[0], "data.src_lang", None), Source(urls[1], "data.tgt_lang", None))
    return plan


def _plan_bitext(sides: SideFiles, split: str) -> Optional[tuple[Source, Source]]:
    if sides.src is None or sides.tgt is None:
        return None  # params.validate allows this only for val and test
    key = f"data.bitext.{split}"
    return (
        Source(sides.src, f"{key}.src", _check_sha(sides.src_sha256, f"{key}.src_sha256")),
        Source(sides.tgt, f"{key}.tgt", _check_sha(sides.tgt_sha256, f"{key}.tgt_sha256")),
    )


def _check_sha(value: Optional[str], key: str) -> Optional[str]:
    if value is None:
        return None
    value = value.strip().lower()
    if not _SHA256.match(value):
        raise UserError(f"{key}: {value!r} is not a sha256 (64 hex digits); fix it or set it to null")
    return value


# --- fetching ------------------------------------------------------------------


def _fetch_lines(source: Source, scratch: Path, mirror: Optional[Path]) -> tuple[list[str], dict[str, Any]]:
    fetched = fetch(source, scratch, mirror)
    lines = decode_lines(fetched.path.read_bytes(), source.location)
    if fetched.via == "network":
        fetched.path.unlink()  # decoded: the scratch copy is no longer needed
    click.echo(f"{source.location}: {len(lines)} lines ({fetched.via})", err=True)
    record = {
        "source": source.location,
        "via": fetched.via,
        "sha256": fetched.sha256,
        "verified": _verified_by(source),
        "lines": len(lines),
    }
    return lines, record


def fetch(source: Source, scratch: Path, mirror: Optional[Path]) -> Fetched:
    """Get the file's bytes (local path, mirror, or network into `scratch`) and verify its sha256."""
    match = _SCHEME.match(source.location)
    if match is None:
        fetched = _fetch_local(source)
    elif match.group(1).lower() in ("http", "https"):
        fetched = _fetch_url(source.location, scratch, mirror)
    else:
        raise UserError(f"{source.key}: {source.location}: only http(s) URLs and local paths are supported")
    _verify(source, fetched)
    return fetched


def _fetch_local(source: Source) -> Fetched:
    path = Path(source.location)
    if not path.is_file():
        raise UserError(f"{source.key}: {path}: no such file; fix the path (relative to the current dir)")
    return Fetched(path, "local", sha256_file(path))


def _fetch_url(url: str, scratch: Path, mirror: Optional[Path]) -> Fetched:
    if mirror is not None:
        mirrored = mirror_path(mirror, url)
        if mirrored.is_file():
            return Fetched(mirrored, "mirror", sha256_file(mirrored))
    try:
        path = download_url(url, scratch)
    except FetchError as e:
        if mirror is None:
            raise UserError(f"cannot fetch {url}: {e}; {_MIRROR_HELP}")
        raise UserError(
            f"{url} is not in the mirror (looked for {mirror_path(mirror, url).absolute()}) "
            f"and cannot be fetched: {e}"
        )
    return Fetched(path, "network", sha256_file(path))


def mirror_path(mirror: Path, url: str) -> Path:
    """Where the mirror keeps `url`: https://HOST/PATH -> MIRROR/HOST/PATH (as `wget -x` stores it)."""
    parts = urllib.parse.urlsplit(url)
    segments = [s for s in parts.path.split("/") if s]
    if not parts.hostname or not segments or any(s in (".", "..") for s in segments):
        raise UserError(f"{url}: not a URL of a file (https://HOST/PATH)")
    return Path(mirror, parts.hostname, *segments)


class FetchError(Exception):
    """The network did not give the file: after every try, or at once for an error that will last."""


def download_url(url: str, scratch: Path) -> Path:
    """Fetch `url` into a new file in `scratch`, retrying with backoff; raise FetchError at the end."""
    tries = len(RETRY_DELAYS) + 1
    for attempt in range(1, tries + 1):
        try:
            return _download_once(url, scratch)
        except (OSError, http.client.HTTPException) as e:  # URLError, timeouts, resets, a short body
            if _lasting(e):
                raise FetchError(f"{e} (not retried)") from e
            if attempt == tries:
                raise FetchError(f"failed {tries} tries, the last with: {e}") from e
            delay = RETRY_DELAYS[attempt - 1]
            click.echo(f"{url}: try {attempt} of {tries} failed ({e}); retrying in {delay:g} s", err=True)
            _sleep(delay)
    raise AssertionError("unreachable")


def _lasting(error: Exception) -> bool:
    """A 4xx answer (a 404, say) will not change by asking again; 408 and 429 may."""
    if not isinstance(error, urllib.error.HTTPError):
        return False
    return 400 <= error.code < 500 and error.code not in (408, 429)


def _download_once(url: str, scratch: Path) -> Path:
    """One try: stream into a temp file; it is deleted unless the whole body arrived."""
    fd, name = tempfile.mkstemp(prefix=".part.", dir=scratch)
    path = Path(name)
    try:
        with os.fdopen(fd, "wb") as f, urllib.request.urlopen(url, timeout=_TIMEOUT_S) as response:
            received = 0
            while chunk := response.read(_CHUNK):
                f.write(chunk)
                received += len(chunk)
            # http.client returns a short body silently when the connection drops early.
            expected = response.headers.get("Content-Length")
            if expected is not None and int(expected) != received:
                raise OSError(f"connection closed after {received} of {expected} bytes")
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return path


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _expected_sums(source: Source) -> list[tuple[str, str]]:
    """The sums a file must match, each with where it came from."""
    sums = []
    if source.sha256 is not None:
        sums.append((source.sha256, f"{source.key}_sha256"))
    pinned = PINNED_SHA256.get(source.location)
    if pinned is not None and pinned != source.sha256:
        sums.append((pinned, "pinned in pipeline/download.py"))
    return sums


def _verified_by(source: Source) -> Optional[str]:
    """Which sums the file was checked against, for the manifest: params, pinned, both, or None."""
    sums = {"params": source.sha256, "pinned": PINNED_SHA256.get(source.location)}
    return "+".join(name for name, value in sums.items() if value) or None


def _verify(source: Source, fetched: Fetched) -> None:
    for expected, origin in _expected_sums(source):
        if fetched.sha256 == expected:
            continue
        if fetched.via == "network":
            fetched.path.unlink()  # never leave a bad download behind
        where = f" (read from the mirror at {fetched.path})" if fetched.via == "mirror" else ""
        raise UserError(
            f"sha256 mismatch for {source.location}{where}: expected {expected} ({origin}), "
            f"got {fetched.sha256}; the file is corrupt or changed upstream; check the source or the sum"
        )


# --- decoding ------------------------------------------------------------------


def decode_lines(data: bytes, name: str) -> list[str]:
    """Lines of a fetched file (gzip or plain), under the decoding policy in the module docstring."""
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:
            raise UserError(f"{name}: a corrupt or truncated gzip file ({e}); fetch it again")
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    # Done on bytes, which is safe: 0x0D and 0x0A never occur inside a UTF-8 multi-byte character.
    data = data.replace(b"\r\n", b"\n")
    if b"\n" not in data:
        data = data.replace(b"\r", b"\n")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise UserError(f"{name}: invalid UTF-8 at line {line} ({e.reason}); re-encode the file as UTF-8")
    if not text:
        raise UserError(f"{name}: the file is empty (no lines); check the source")
    lines = text.split("\n")
    return lines[:-1] if text.endswith("\n") else lines


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
    plan: dict[str, Optional[tuple[Source, Source]]],
    pairs: dict[str, tuple[list[str], list[str]]],
    records: dict[str, dict[str, Any]],
) -> Optional[dict[str, Any]]:
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
    data: DataParams, records: dict[str, dict[str, Any]], heldout: Optional[dict[str, Any]]
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
