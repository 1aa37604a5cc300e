"""Bring your own data, physical units: scale/offset from the files' tags and GDAL band metadata,
per-band settings in one source, the implausible-units warning and the skipped-files summary.
Files are real GeoTIFFs written with rasterio in tmp_path; expected values are DN × scale + offset
computed here."""

from __future__ import annotations

import numpy as np
import rasterio
from affine import Affine

from earthrl.envs.data.catalog import catalog, reflectance
from earthrl.launch.catalog_cmd import main as catalog_main

SHAPE = (9, 11)
GRID = dict(crs="EPSG:3857", transform=Affine(1000, 0, 1.0e6, 0, -1000, 4.0e6))


def _tif(path, arr, *, band_tags=None, tags=None, description=None, scale=None, offset=None, nodata=0):
    path.parent.mkdir(parents=True, exist_ok=True)
    with rasterio.open(path, "w", driver="GTiff", height=SHAPE[0], width=SHAPE[1], count=1, dtype=arr.dtype.name,
                       nodata=nodata, **GRID) as dst:
        dst.write(arr, 1)
        if tags:
            dst.update_tags(**tags)
        if band_tags:
            dst.update_tags(1, **band_tags)
        if description:
            dst.descriptions = (description,)
        if scale is not None:
            dst.scales = (scale,)
            dst.offsets = (offset or 0.0,)
    return path


def _counts(seed, lo, hi, dtype="int16"):
    a = np.random.default_rng(seed).integers(lo, hi, SHAPE).astype(dtype)
    a[0, 0] = 0  # fill
    return a


def _physical(dn, scale, offset):
    want = dn.astype(np.float64) * scale + offset
    want[0, 0] = np.nan
    return want


def test_scale_tags_and_gdal_scale_offset_load_in_physical_units(home, tmp_path, capsys):
    d = tmp_path / "modis"
    lst = _counts(1, 13000, 16000, "uint16")  # MODIS LST counts: K = DN × 0.02
    ndvi = _counts(2, -2000, 9000)  # NDVI × 10000
    evi = _counts(3, -1000, 8000)
    sr = _counts(4, 8000, 30000, "uint16")  # Landsat Collection 2 surface reflectance
    day = {"DATE": "2019-07-04", "SENSOR": "MODIS"}
    _tif(d / "lst.tif", lst, tags=day, description="LST", band_tags={"scale": "0.02", "UNITS": "K"})
    _tif(d / "ndvi.tif", ndvi, tags={**day, "scale_factor": "0.0001"}, description="NDVI")  # a dataset tag
    _tif(d / "evi.tif", evi, tags=day, description="EVI", band_tags={"scale_factor": "0.0001", "add_offset": "0.05"})
    _tif(d / "sr.tif", sr, tags=day, description="red", scale=2.75e-5, offset=-0.2)  # GDAL scale/offset
    assert catalog_main(["add", str(d)]) == 0
    err = capsys.readouterr().err
    assert "warning" not in err  # physical values: nothing implausible
    s = catalog(tmp_path / "empty")["modis_modis_20190704"]
    for band, dn, scale, offset in (("LST", lst, 0.02, 0.0), ("NDVI", ndvi, 1e-4, 0.0), ("EVI", evi, 1e-4, 0.05),
                                    ("red", sr, 2.75e-5, -0.2)):
        arr, _ = reflectance(s, band)
        want = _physical(dn, scale, offset)
        assert np.isnan(arr[0, 0]), band
        assert np.allclose(arr[1:], want[1:], rtol=1e-6, atol=1e-6), band
    assert s.band_info["LST"].units == "K" and 260 < np.nanmean(reflectance(s, "LST")[0]) < 320


def test_raw_counts_labelled_kelvin_get_one_warning_with_the_scale(home, tmp_path, capsys):
    d = tmp_path / "raw"
    for i, date in enumerate(("2019-01-01", "2019-01-17", "2019-02-02")):
        _tif(d / f"LST_{date}.tif", _counts(10 + i, 13000, 16000, "uint16"),
             band_tags={"UNITS": "K"}, description="LST", tags={"DATE": date})
        _tif(d / f"NDVI_{date}.tif", _counts(20 + i, -2000, 9000), description="NDVI", tags={"DATE": date})
    assert catalog_main(["add", str(d), "--pattern", "{band}_{date}.tif"]) == 0
    warn = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warn) == 2  # one per band, not one per file
    lst = next(w for w in warn if w.startswith("earthrl: warning: LST (3 files) is in 'K'"))
    assert "outside the plausible 150..400" in lst and "--band-scale LST=0.02" in lst
    ndvi = next(w for w in warn if w.startswith("earthrl: warning: NDVI (3 files)"))
    assert "outside the plausible -1..1" in ndvi and "--band-scale NDVI=0.0001" in ndvi


def test_per_band_settings_in_one_source(home, tmp_path, capsys):
    d = tmp_path / "q1"
    dates = ("2019-01-01", "2019-01-17")
    arrays = {}
    for i, date in enumerate(dates):
        for band, lo, hi in (("LST", 13000, 16000), ("NDVI", -2000, 9000)):
            arrays[band, date] = _counts(30 + i + 7 * (band == "LST"), lo, hi, "int32")
            _tif(d / band / f"{band}_{date}.tif", arrays[band, date], nodata=None)
    assert catalog_main(["add", str(d), "--pattern", "{band}/*_{date}.tif", "--nodata", "0",
                         "--band-scale", "LST=0.02", "--band-units", "lst=K",
                         "--band-scale", "NDVI=0.0001", "--band-offset", "NDVI=0.001"]) == 0
    cap = capsys.readouterr()
    assert "indexed 2 scenes (4 bands)" in cap.out and "warning" not in cap.err
    scenes = catalog(tmp_path / "empty")
    s = scenes["q1_unknown_20190117"]
    assert (s.band_info["LST"].scale, s.band_info["LST"].units) == (0.02, "K")
    assert (s.band_info["NDVI"].scale, s.band_info["NDVI"].offset) == (1e-4, 0.001)
    for band, scale, offset in (("LST", 0.02, 0.0), ("NDVI", 1e-4, 0.001)):
        arr, _ = reflectance(s, band)
        assert np.allclose(arr[1:], _physical(arrays[band, dates[1]], scale, offset)[1:], rtol=1e-6, atol=1e-7)
    # a setting for a band that is not there: one line naming it, nothing written
    before = (home / "catalog" / "user.json").read_bytes()
    assert catalog_main(["add", str(d), "--name", "q2", "--pattern", "{band}/*_{date}.tif",
                         "--band-scale", "LSTX=0.02"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "earthrl: error: --band-scale LSTX=…: no indexed band is named 'LSTX'; bands: LST, NDVI"
    assert (home / "catalog" / "user.json").read_bytes() == before
    assert catalog_main(["add", str(d), "--band-scale", "LST"]) == 2
    assert "--band-scale 'LST': write NAME=VALUE" in capsys.readouterr().err
    assert catalog_main(["add", str(d), "--band-offset", "LST=abc"]) == 2
    assert "'abc' is not a number" in capsys.readouterr().err


def test_many_skipped_files_are_a_few_summary_lines(home, tmp_path, capsys):
    d = tmp_path / "many"
    for i in range(40):
        date = f"2019{i + 1:03d}"
        _tif(d / "NDVI" / f"NDVI_{date}.tif", _counts(i, 0, 9000), description="NDVI", scale=1e-4)
        _tif(d / "LST" / f"lst.{date}.tif", _counts(i, 13000, 16000, "uint16"), description="LST")  # no match
        _tif(d / "QA" / f"QA_{date}.tif", _counts(i, 0, 3, "uint8"))  # no band name
    (d / "NDVI" / "NDVI_2020001.tif").write_bytes(b"broken")
    assert catalog_main(["add", str(d), "--pattern", "*/*_{date}.tif"]) == 0
    cap = capsys.readouterr()
    err = cap.err.splitlines()
    assert len(err) == 3 and all(line.startswith("earthrl: skipped ") for line in err)  # 81 files, 3 reasons
    assert err[0] == ("earthrl: skipped 40 × name does not match --pattern '*/*_{date}.tif': LST/lst.2019001.tif, "
                      "LST/lst.2019002.tif, LST/lst.2019003.tif and 37 more")
    assert err[1].startswith("earthrl: skipped 40 × unknown band 1 (no band name") and \
        err[1].endswith(": QA/QA_2019001.tif, QA/QA_2019002.tif, QA/QA_2019003.tif and 37 more")
    assert err[2] == "earthrl: skipped 1 × unreadable: NDVI/NDVI_2020001.tif"
    assert "81 skipped" in cap.out and "indexed 40 scenes (40 bands)" in cap.out
