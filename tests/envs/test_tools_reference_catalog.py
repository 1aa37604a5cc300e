"""Bookkeeping tools (``list_files``, ``read_metadata``, ``search_catalog``, ``answer``) checked
against what the files themselves say: band files on disk and their rasterio headers (CRS, size,
resolution, dtype, nodata), acquisition dates decoded here from the Landsat ids (year + day of
year), and an answer taken from a tool result equal to the numpy value of the raw rasters."""

from __future__ import annotations

import datetime as dt
import json

import numpy as np
import pytest
import rasterio

S2 = "S2_T33UUU_20170216"
LS = ["LT50350322008110PAC01", "LE70350322008118EDC00", "LT50350322009112PAC01",
      "LT50350322010083PAC01", "LT50350322011134PAC01"]


def _date(sid: str) -> str:
    return (dt.date(int(sid[9:13]), 1, 1) + dt.timedelta(days=int(sid[13:16]) - 1)).isoformat()


def _files(root, sid):
    return sorted((root / "lsts" / sid).glob(f"{sid}_*.tif"))


def test_list_files_names_every_band_file_and_artifact(make_env, run, data_root):
    present = [s for s in LS if (data_root / "lsts" / s).is_dir()]
    assert len(present) >= 4
    env = make_env(*present, toolset="all")
    run(env, "ndvi", scene=present[0])
    r = run(env, "list_files")
    assert not r.error, r.observation
    assert r.result["scenes"] == present and r.result["artifacts"] == [f"ndvi_{present[0]}"]
    lines = r.observation.splitlines()
    for sid, line in zip(present, lines):
        sid_, sensor, date, bands = (x.strip() for x in line.split("|"))
        on_disk = sorted(p.stem.split("_", 1)[1] for p in _files(data_root, sid))
        assert sid_ == sid and date == _date(sid) and sorted(bands.split(",")) == on_disk
        assert sensor == {"LT5": "landsat-5", "LE7": "landsat-7"}[sid[:3]]
    art = env.registry.get(f"ndvi_{present[0]}")
    assert lines[len(present)] == f"ndvi_{present[0]} | raster | index" and art.path.is_file()


@pytest.mark.parametrize("sid", [LS[0], S2])
def test_read_metadata_equals_the_rasterio_headers(make_env, run, data_root, sid):
    env = make_env(sid, toolset="all")
    md = run(env, "read_metadata", name=sid).result
    paths = (sorted((data_root / "s2l1c/IMG_DATA").glob("T33UUU_20170216T102101_B*.jp2")) if sid == S2
             else _files(data_root, sid))
    groups: dict[str, set] = {}
    for p in paths:
        with rasterio.open(p) as src:
            key = f"{src.res[0]:g}m {src.height}x{src.width} {src.dtypes[0]}"
            groups.setdefault(key, set()).add(p.stem.rsplit("_", 1)[1])
            assert md["crs"] == f"EPSG:{src.crs.to_epsg()}"
            if sid != S2 and p.stem.endswith(("b3", "b4", "b5")):
                assert md["nodata"] == src.nodata == -9999
    assert {k: set(v.split(",")) for k, v in md["bands"].items()} == groups
    assert md["date"] == ("2017-02-16" if sid == S2 else _date(sid))
    r = run(env, "ndvi", scene=sid)
    amd = run(env, "read_metadata", name=r.result["artifact"]).result
    with rasterio.open(env.registry.get(r.result["artifact"]).path) as src:
        assert amd["shape"] == [src.height, src.width] and amd["res_m"] == src.res[0]
        assert amd["crs"] == f"EPSG:{src.crs.to_epsg()}" and amd["dtype"] == src.dtypes[0] == "float32"
    assert amd["nodata"] == "NaN" and amd["parents"] == [sid]


def test_search_catalog_filters_by_dates_decoded_from_the_ids(make_env, run, data_root):
    ids = sorted(p.name for p in (data_root / "lsts").iterdir())[:40]
    env = make_env(*ids, toolset="all")
    for start, end in (("2008-06-01", "2009-03-31"), ("2009-01-01", None), (None, "2008-05-30")):
        args = {k: v for k, v in (("start", start), ("end", end)) if v}
        got = run(env, "search_catalog", **args)
        assert not got.error, got.observation
        want = sorted((s for s in ids if (start is None or _date(s) >= start) and (end is None or _date(s) <= end)),
                      key=_date)
        assert got.result["scenes"] == want and got.result["count"] == len(want) > 0, args
    l7 = run(env, "search_catalog", sensor="landsat-7").result["scenes"]
    assert l7 == sorted((s for s in ids if s.startswith("LE7")), key=_date) and l7
    fm = run(env, "search_catalog", band="fmask").result["count"]
    assert fm == sum((data_root / "lsts" / s / f"{s}_fmask.tif").exists() for s in ids)


def test_answer_records_the_value_from_the_raw_rasters(make_env, run, raw):
    sid = LS[0]
    env = make_env(sid)
    run(env, "spectral_index", scene=sid, index="NDVI")
    mean = run(env, "raster_stats", name=f"ndvi_{sid}").result["mean"]
    nd = (raw.ls(sid, "b4") - raw.ls(sid, "b3")) / (raw.ls(sid, "b4") + raw.ls(sid, "b3"))
    assert mean == pytest.approx(np.nanmean(nd), abs=1e-6)
    r = env.step("<tool_call>" + json.dumps({"name": "answer", "arguments": {"value": mean, "unit": "index"}})
                 + "</tool_call>")
    assert r.done and not r.error
    assert r.answer == {"value": mean, "unit": "index"}  # full precision, not the rounded text
    assert r.answer["value"] == pytest.approx(np.nanmean(nd), abs=1e-6)
