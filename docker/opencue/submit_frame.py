#!/usr/bin/env python3
"""One facetrace frame on OpenCue (docs/farm.md "OpenCue"): a Render layer of 64 tasks, task #IFRAME# rendering
work units [8·i, 8·i + 8) of the job file, then a Util layer (one task) that merges the partials.

    pip install opencue-pycue opencue-pyoutline   # CUEBOT_HOSTNAME_OR_IP must name the Cuebot
    python3 docker/opencue/submit_frame.py /shared/jobs/job.json /shared/parts --tasks 64 --units-per-task 8

OpenCue substitutes #IFRAME# textually; the worker's --index / --units-per-index do the unit arithmetic.
"""
import argparse

import outline
import outline.cuerun
import outline.modules.shell


def build(job, parts, tasks, per_task, show, shot):
    ol = outline.Outline("facetrace-frame", show=show, shot=shot)
    render = outline.modules.shell.Shell(
        "render", type="Render", range=f"0-{tasks - 1}", chunk=1,
        command=["facetrace", "worker", "--job", job, "--index", "#IFRAME#", "--units-per-index", str(per_task),
                 "--out", parts])
    merge = outline.modules.shell.Shell(
        "merge", type="Util", range="0", chunk=1,
        command=["facetrace", "merge", parts, "--exr", f"{parts}/sums.exr", "--png", f"{parts}/frame.png"])
    merge.depend_on(render)
    ol.add_layer(render)
    ol.add_layer(merge)
    return ol


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("job")
    p.add_argument("parts")
    p.add_argument("--tasks", type=int, default=64)
    p.add_argument("--units-per-task", type=int, default=8)
    p.add_argument("--show", default="facetrace")
    p.add_argument("--shot", default="frame")
    a = p.parse_args()
    outline.cuerun.launch(build(a.job, a.parts, a.tasks, a.units_per_task, a.show, a.shot), use_pycuerun=False)


if __name__ == "__main__":
    main()
