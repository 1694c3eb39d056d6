"""dnsbench's histogram figure: drawn from the CSV dnsbench writes, one line per report,
gaps between bins drawn as zero."""

from __future__ import annotations

import matplotlib.image as mpimg

from doqscan_analysis import benchplot

HEADER = "target,protocol,variant,address,policy,load,workers,streams,label,path_loss,metric,lo_ms,hi_ms,count,share,cumulative\n"


def test_steps_fill_gaps():
    import pandas as pd
    bins = pd.DataFrame({"lo_ms": [1.0, 1.5], "hi_ms": [1.0625 - 1e-6, 1.5625 - 1e-6], "share": [0.25, 0.75]})
    edges, values = benchplot.steps(bins)
    assert values == [0.25, 0.0, 0.75]
    assert len(edges) == len(values) + 1
    assert edges[0] == 1.0 and edges[2] == 1.5


def test_figure_one_line_per_report(tmp_path):
    csv = tmp_path / "h.csv"
    csv.write_text(HEADER
                   + "doq://198.19.3.7:853,doq,,198.19.3.7:853,fresh,max,1,1,,,resolve,1,1.062499,3,0.75,0.75\n"
                   + "doq://198.19.3.7:853,doq,,198.19.3.7:853,fresh,max,1,1,,,resolve,2,2.124999,1,0.25,1\n"
                   + "doq://198.19.3.7:853,doq,,198.19.3.7:853,fresh,max,1,1,,,total,3,3.187499,4,1,1\n"
                   + "dot://198.19.3.7:853,dot,,198.19.3.7:853,fresh,max,1,1,x,0.05,resolve,4,4.249999,2,1,1\n")
    fig = benchplot.figure(str(csv))
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert len(labels) == 2 and "n=4" in labels[0] and "loss=5%" in labels[1]
    assert ax.get_xscale() == "log"
    png = tmp_path / "h.png"
    assert benchplot.main([str(csv), str(png)]) == 0
    assert mpimg.imread(png).shape[0] > 100


def test_empty_csv_draws_a_note(tmp_path):
    csv = tmp_path / "e.csv"
    csv.write_text(HEADER)
    fig = benchplot.figure(str(csv))
    assert "no answered queries" in [t.get_text() for t in fig.axes[0].texts]
