"""`odelab graph`: node classification and the graph studies from the command line, on small generated graphs."""
import json

from odelab.cli import main


def test_graph_fit_writes_results(tmp_path, capsys):
    out = tmp_path / "fit"
    code = main(["graph", "fit", "--dataset", "partition", "--model", "g2-gcn", "--layers", "2", "--hidden", "8",
                 "--epochs", "5", "--nodes-per-class", "60", "--no-progress", "--out", str(out)])
    assert code == 0
    result = json.loads((out / "results.json").read_text())
    assert result["model"] == "g2-gcn" and result["layers"] == 2 and 0.0 <= result["test_acc"] <= 1.0
    assert "test accuracy" in capsys.readouterr().out


def test_graph_fit_reads_real_data_only_from_a_local_folder(tmp_path, capsys):
    assert main(["graph", "fit", "--dataset", "cora", "--epochs", "1"]) == 2
    assert "--data-root" in capsys.readouterr().err
    assert main(["graph", "fit", "--dataset", "texas", "--data-root", str(tmp_path), "--epochs", "1"]) == 2
    assert "out1_node_feature_label.txt" in capsys.readouterr().err  # names the missing file


def test_depth_sweep_writes_json_and_figure(tmp_path):
    out = tmp_path / "depth"
    assert main(["graph", "depth-sweep", "--depths", "1,2", "--models", "gcn,g2-gcn", "--epochs", "2", "--seeds", "1",
                 "--no-progress", "--out", str(out)]) == 0
    result = json.loads((out / "graph_depth_sweep.json").read_text())
    assert [r["layers"] for r in result["results"]["gcn"]] == [1, 2]
    assert (out / "graph_depth_sweep.png").exists()


def test_graph_fit_refuses_a_graph_without_test_nodes(capsys):
    assert main(["graph", "fit", "--nodes-per-class", "30", "--epochs", "1", "--no-progress"]) == 2
    assert "no node is left for testing" in capsys.readouterr().err


def test_graph_numbers_are_validated_by_name(capsys):
    import pytest

    for argv, name in ((["fit", "--dropout", "1"], "--dropout"), (["fit", "--homophily", "1.5"], "--homophily"),
                       (["fit", "--weight-decay", "-1"], "--weight-decay"), (["fit", "--layers", "0"], "--layers"),
                       (["depth-sweep", "--depths", "2,0"], "--depths"), (["homophily-sweep", "--homophilies", "2"],
                                                                          "--homophilies")):
        with pytest.raises(SystemExit) as exit_:
            main(["graph", *argv])
        assert exit_.value.code == 2 and name in capsys.readouterr().err
