"""CSV reading of ``odelab fit csv`` (issue 17, item 1; issue 12, item 6): nothing is dropped silently, index and
date columns are named, bad cells are reported with their line, delimiters are sniffed, a byte-order mark is
dropped, other encodings are named, thousands separators are read or refused by name; the distribution-shift
warning and ``difference``. Every test writes its own small file."""
import json
import math

import numpy as np
import pytest
import torch

from odelab.data.csv_series import csv_persistence_rmse, csv_series, read_columns, read_times, rmse_by_column


def write(path, header, rows, encoding="utf-8", bom=False):
    with open(path, "w", encoding=encoding, newline="") as f:
        f.write(("\ufeff" if bom else "") + header + "\n" + "".join(row + "\n" for row in rows))
    return path


def series(rows=60):
    t = np.arange(rows)
    return 10 + 3 * np.sin(t / 5), 20 + np.cos(t / 7)


def test_csv_semicolon_and_tab_are_sniffed_and_the_bom_is_dropped(tmp_path):
    a, b = series()
    semi = write(tmp_path / "semi.csv", "load;temp", [f"{x:.6f};{y:.6f}" for x, y in zip(a, b)], bom=True)
    names, values, report = read_columns(semi)
    assert names == ["load", "temp"] and report["delimiter"] == ";"  # not '\ufeffload'
    assert np.allclose(values.numpy(), np.stack([a, b], 1), atol=1e-6)
    tab = write(tmp_path / "tab.csv", "load\ttemp", [f"{x:.6f}\t{y:.6f}" for x, y in zip(a, b)], bom=True)
    names, values, report = read_columns(tab, ["load"])
    assert names == ["load"] and report["delimiter"] == "\t" and "delimiter '\\t' (sniffed)" in report["notes"]
    pipe = write(tmp_path / "pipe.csv", "load|temp", [f"{x:.6f}|{y:.6f}" for x, y in zip(a, b)])
    assert read_columns(pipe)[0] == ["load", "temp"]


def test_csv_decimal_commas_in_a_semicolon_file_are_read_and_reported(tmp_path):
    a, b = series()
    path = write(tmp_path / "eu.csv", "load;temp", [f"{x:.4f};{y:.4f}".replace(".", ",") for x, y in zip(a, b)])
    names, values, report = read_columns(path)
    assert np.allclose(values.numpy(), np.stack([a, b], 1), atol=1e-4)
    assert any("column 'load': decimal commas read" in note for note in report["notes"])


def test_csv_index_and_date_columns_are_left_out_and_named(tmp_path):
    a, b = series()
    rows = [f"{1700 + i},{1958 + i / 12:.4f},2024-01-{i:02d},{x:.5f},{y:.5f}" for i, (x, y) in enumerate(zip(a, b))]
    path = write(tmp_path / "s.csv", "YEAR,decimal date,date,load,temp", rows)
    names, values, report = read_columns(path)
    assert names == ["load", "temp"]
    assert set(report["excluded"]) == {"YEAR", "decimal date", "date"}
    assert "constant step 1" in report["excluded"]["YEAR"]
    assert "time or index" in report["excluded"]["decimal date"]
    assert report["excluded"]["date"].startswith("not numeric, e.g. line 2: '2024-01-00'")
    assert any("'YEAR'" in note and "--columns" in note for note in report["notes"])
    # named explicitly, an index column is modelled
    assert read_columns(path, ["YEAR", "load"])[0] == ["YEAR", "load"]


def test_csv_a_bad_cell_leaves_its_column_out_with_the_line_or_is_an_error_when_strict(tmp_path):
    a, b = series()
    rows = [f"{x:.5f},{y:.5f}" for x, y in zip(a, b)]
    rows[10] = f",{b[10]:.5f}"  # line 12 of the file (the header is line 1)
    rows[20] = f"n/a,{b[20]:.5f}"
    path = write(tmp_path / "hole.csv", "load,temp", rows)
    names, values, report = read_columns(path)
    assert names == ["temp"] and values.shape == (60, 1)
    assert report["excluded"]["load"] == "a bad cell: line 12: '' is a missing value (2 bad cells in all)"
    assert any("'load' (a bad cell: line 12" in note for note in report["notes"])
    with pytest.raises(ValueError, match=r"csv: --strict: column 'load' has a bad cell: line 12: '' is a missing"):
        read_columns(path, strict=True)
    with pytest.raises(ValueError, match=r"columns: column 'load' has a missing or non-numeric value: line 12"):
        read_columns(path, ["load", "temp"])  # --columns implies --strict
    rows[30] = f"{a[30]:.5f},abc"
    write(tmp_path / "both.csv", "load,temp", rows)
    with pytest.raises(ValueError, match=r"no column to model \('load': a bad cell: line 12.*'temp': a bad cell: "
                                         r"line 32: 'abc' is not a number"):
        read_columns(tmp_path / "both.csv")


def test_csv_missing_values_are_filled_from_above_or_linearly(tmp_path):
    a, b = series()
    rows = [f"{x:.5f},{y:.5f}" for x, y in zip(a, b)]
    for i in (0, 1, 10, 11, 12, 59):  # two before the first value, three in a row, the last
        rows[i] = f"{'NA' if i == 11 else ''},{b[i]:.5f}"
    path = write(tmp_path / "gaps.csv", "load,temp", rows)
    known = np.array([float(f"{x:.5f}") for x in a])
    with pytest.raises(ValueError, match=r"columns: column 'load' has a missing .*line 2.*--missing previous\|linear"):
        read_columns(path, ["load", "temp"])
    names, values, report = read_columns(path, ["load", "temp"], missing="previous")
    load = values[:, 0].numpy()
    assert names == ["load", "temp"] and report["filled"] == {"load": 6}
    assert load[0] == load[1] == known[2]  # before the first value: that value
    assert load[10] == load[11] == load[12] == known[9] and load[59] == known[58]
    assert "column 'load': 6 missing values filled by the value above (first on line 2)" in report["notes"]
    _, values, report = read_columns(path, missing="linear")  # without --columns the column is modelled too
    load = values[:, 0].numpy()
    assert load[0] == load[1] == known[2] and load[59] == known[58]
    for i, w in ((10, 0.25), (11, 0.5), (12, 0.75)):  # a straight line from row 9 to row 13
        assert load[i] == pytest.approx((1 - w) * known[9] + w * known[13], rel=1e-12)
    assert np.array_equal(np.delete(load, [0, 1, 10, 11, 12, 59]), np.delete(known, [0, 1, 10, 11, 12, 59]))
    rows[30] = f"abc,{b[30]:.5f}"  # not a number: still a bad cell, filled or not
    write(path, "load,temp", rows)
    names, _, report = read_columns(path, missing="linear")
    assert names == ["temp"] and "line 32: 'abc' is not a number" in report["excluded"]["load"]
    with pytest.raises(ValueError, match="missing: expected one of error, previous, linear, got 'mean'"):
        read_columns(path, missing="mean")


def test_csv_fit_fills_missing_values_on_the_command_line(tmp_path, capsys):
    from odelab.cli import main

    a, b = series(200)
    rows = [("" if i % 17 == 3 else f"{x:.5f}") + f",{y:.5f}" for i, (x, y) in enumerate(zip(a, b))]
    path = write(tmp_path / "gaps.csv", "load,temp", rows)
    out = tmp_path / "run"
    assert main(["fit", "csv", "--csv", str(path), "--columns", "load,temp", "--missing", "linear", "--epochs", "1",
                 "--hidden", "4", "--no-progress", "--out", str(out)]) == 0
    assert "column 'load': 12 missing values filled by linear interpolation" in capsys.readouterr().out
    result = json.loads((out / "results.json").read_text())
    assert result["data"]["filled"] == {"load": 12} and result["settings"]["missing"] == "linear"
    with pytest.raises(SystemExit):
        main(["fit", "fhn", "--missing", "linear"])
    assert "--missing: only for the task(s) csv" in capsys.readouterr().err


def test_csv_time_column_gives_each_row_its_time_to_the_next(tmp_path):
    a, b = series(80)
    t = np.cumsum(np.random.default_rng(0).uniform(0.2, 1.8, 80)).round(4)
    path = write(tmp_path / "times.csv", "when,load,temp", [f"{w},{x:.5f},{y:.5f}" for w, x, y in zip(t, a, b)])
    plain = csv_series(path, ["load", "temp"], horizon=2)
    timed = csv_series(path, ["load", "temp"], horizon=2, time="when")
    gaps = np.diff(t)
    median = np.median(gaps[:56])  # of the training rows 0 … 55 and the gap to the next: the unit of time
    meta = timed["meta"]
    assert meta["time_gaps"] and meta["time"] == "when" and meta["median_gap"] == pytest.approx(median, rel=1e-12)
    for split in ("train", "valid", "test"):  # the values as without the times, the gap beside them
        assert torch.equal(timed[split][0][..., :2], plain[split][0]) and torch.equal(timed[split][1], plain[split][1])
    first = meta["splits"]["test"][0]
    x = timed["test"][0][0]
    assert np.allclose(x[:, 2].numpy(), gaps[first:first + x.shape[0]] / median, rtol=1e-6)
    assert csv_persistence_rmse(timed) == csv_persistence_rmse(plain)  # the gap is no value to persist
    differenced = csv_series(path, ["load"], time="when", difference=True)  # increment k ends at t[k + 1]
    x = differenced["valid"][0][0]
    first = differenced["meta"]["splits"]["valid"][0]
    assert np.allclose(x[:, 1].numpy(), gaps[first + 1:first + 1 + x.shape[0]] / median, rtol=1e-6)
    assert read_columns(path, time="when")[0] == ["load", "temp"]  # never modelled
    assert read_columns(path, time="when")[2]["excluded"]["when"] == "the time column (--time)"
    with pytest.raises(ValueError, match="columns: 'when' is the time column"):
        read_columns(path, ["when", "load"], time="when")
    with pytest.raises(ValueError, match="time: unknown column 'then'"):
        csv_series(path, ["load"], time="then")


def test_csv_times_read_as_iso_dates_in_order(tmp_path):
    rows = ["2024-03-01,1", "2024-03-01T06:00,2", "2024-03-02 12:30:00,3", "2024-03-04,4"]
    times, kind, origin = read_times(write(tmp_path / "d.csv", "date,x", rows), "date")
    assert kind == "datetime" and origin.isoformat() == "2024-03-01T00:00:00"
    assert times.tolist() == [0.0, 6 * 3600.0, 36.5 * 3600.0, 72 * 3600.0]
    for bad, message in ((["2024-03-02,1", "2024-03-01,2"], r"line 3: '2024-03-01' is not after line 2's "
                                                             r"'2024-03-02'; the rows must be in time order"),
                         (["1,1", "1,2"], "line 3: '1' is not after line 2's '1'"),
                         (["2024-03-01,1", "soon,2"], "line 3: 'soon' is neither a number nor an ISO 8601 date"),
                         (["1,1", "2024-03-01,2"], "mixes numbers and dates"),
                         (["2024-03-01T00:00+01:00,1", "2024-03-02T00:00,2"], "differ in having a UTC offset")):
        with pytest.raises(ValueError, match="time: .*" + message):
            read_times(write(tmp_path / "bad.csv", "date,x", bad), "date")


def test_csv_ragged_rows_are_reported_or_refused(tmp_path):
    a, b = series()
    rows = [f"{x:.5f},{y:.5f}" for x, y in zip(a, b)]
    rows[5] = f"{a[5]:.5f}"  # a short row: line 7
    path = write(tmp_path / "short.csv", "load,temp", rows)
    names, _, report = read_columns(path)
    assert names == ["load"] and "line 7: '' is missing: the row has fewer fields" in report["excluded"]["temp"]
    rows[5] = f"{a[5]:.5f},{b[5]:.5f},7"  # a long row
    write(path, "load,temp", rows)
    with pytest.raises(ValueError, match="line 7 has 3 fields but the header has 2"):
        read_columns(path)
    rows = [f"{x:.5f},{y:.5f}," for x, y in zip(a, b)]  # a trailing delimiter everywhere is harmless
    assert read_columns(write(path, "load,temp,", rows))[0] == ["load", "temp"]


def test_csv_thousands_separators_are_read_by_name_or_refused(tmp_path):
    a, b = series()
    price = 1000 + 10 * b
    path = write(tmp_path / "quoted.csv", "load,price", [f'{x:.5f},"{p:,.2f}"' for x, p in zip(a, price)])
    names, values, report = read_columns(path)
    assert names == ["load", "price"] and np.allclose(values[:, 1].numpy(), np.round(price, 2))
    assert any("column 'price': thousands separators removed (e.g. '1,210.00' on line 2 read as 1210)" in note
               for note in report["notes"])
    write(path, "load,price", [f"{x:.5f},{p:,.2f}" for x, p in zip(a, price)])  # unquoted: the row splits
    with pytest.raises(ValueError, match=r"line 2 has 3 fields but the header has 2.*unquoted thousands separator"):
        read_columns(path)
    # '1,234' in a ';' file is a thousands separator or a decimal comma: refused, by name
    rows = [f"{x:.5f};{1000 + i}" for i, x in enumerate(a)]
    rows[3] = f"{a[3]:.5f};1,003"
    write(path, "load;count", rows)
    names, _, report = read_columns(path)
    assert names == ["load"] and "line 5: '1,003' is ambiguous" in report["excluded"]["count"]
    with pytest.raises(ValueError, match="'1,003' is ambiguous: a thousands separator or a decimal comma"):
        read_columns(path, ["load", "count"])


def test_csv_duplicate_header_and_missing_file_are_refused(tmp_path):
    a, b = series()
    path = write(tmp_path / "dup.csv", "load,load", [f"{x:.5f},{y:.5f}" for x, y in zip(a, b)])
    with pytest.raises(ValueError, match="names the column 'load' twice"):
        read_columns(path)
    with pytest.raises(ValueError, match="csv: no such file"):
        read_columns(tmp_path / "nope.csv")


def test_csv_latin1_file_names_the_file_and_encoding(tmp_path):
    a, b = series()
    path = write(tmp_path / "latin.csv", "température,charge", [f"{y:.5f},{x:.5f}" for x, y in zip(a, b)],
                 encoding="latin-1")
    with pytest.raises(ValueError, match=r"latin\.csv' is not utf-8 text \(byte 0xe9 on line 1\); give the file's "
                                         r"encoding with e\.g\. --encoding latin-1"):
        read_columns(path)
    names, values, report = read_columns(path, encoding="latin-1")
    assert names == ["température", "charge"] and report["encoding"] == "latin-1"
    with pytest.raises(ValueError, match="encoding: unknown encoding 'klingon'"):
        read_columns(path, encoding="klingon")


def test_csv_distribution_shift_is_warned_and_difference_reports_levels(tmp_path):
    t = np.arange(120)
    co2 = 315 + 0.3 * t + 3 * np.sin(2 * np.pi * t / 12)
    path = write(tmp_path / "co2.csv", "year,co2", [f"{1958 + i / 12:.4f},{v:.3f}" for i, v in enumerate(co2)])
    data = csv_series(path, window=16)
    assert data["meta"]["columns"] == ["co2"] and "year" in data["meta"]["excluded"]
    warnings = data["meta"]["warnings"]
    assert warnings and all("distribution shift" in w and "--difference" in w for w in warnings)
    assert any("the test part of 'co2' (rows 102–119)" in w for w in warnings)

    diffed = csv_series(path, window=16, horizon=2, difference=True)
    meta = diffed["meta"]
    assert meta["difference"] and meta["rows"] == 120 and not meta["warnings"]  # the increments are stationary
    increments = np.diff(np.round(co2, 3))
    assert meta["splits"]["test"] == [100, 119]
    x, y = diffed["test"]
    mean, std = np.array(meta["mean"]), np.array(meta["std"])
    assert np.allclose(x[0, :, 0].numpy() * std + mean, increments[100:117], atol=1e-4)
    # perfect increments give level error 0; persistence of the level: s[n+1+h] - s[n+1]
    assert max(v for values in rmse_by_column(y, x, y, meta).values() for v in [values["model"]]) < 1e-12
    levels = np.round(co2, 3)[101:]  # s[n+1] for the test inputs d_n = s[n+1] - s[n], n = 100, ...
    errors = [levels[k + h] - levels[k] for k in range(x.shape[1]) for h in (1, 2)]
    expected = math.sqrt(np.mean(np.square(errors)))
    assert abs(rmse_by_column(y, x, y, meta)["co2"]["persistence"] - expected) < 1e-3
    # the persistence baseline in the model's units is the same zero-increment forecast
    zero = torch.full_like(y, float(-mean[0] / std[0]))
    assert abs(csv_persistence_rmse(diffed) - float(((zero - y) ** 2).mean().sqrt())) < 1e-6


def test_csv_stationary_series_gives_no_shift_warning_and_records_its_hash(tmp_path):
    a, b = series(200)
    path = write(tmp_path / "s.csv", "load,temp", [f"{x:.5f},{y:.5f}" for x, y in zip(a, b)])
    meta = csv_series(path, window=16)["meta"]
    assert meta["warnings"] == [] and len(meta["sha256"]) == 64 and meta["excluded"] == {}
