#!/usr/bin/env python3
"""Static checks of the farm recipes in docker/ (docs/farm.md "What was checked here"): no Docker daemon, registry,
cluster or scheduler is reachable where this runs, so the recipes are checked for what the farm tools require.

  Dockerfile   multi-stage CUDA 13 cuDNN devel -> runtime; the build stage builds the release preset and runs the cpu
               tests; non-root USER; tini; NVIDIA_DRIVER_CAPABILITIES=compute,utility; ENTRYPOINT facetrace;
               HEALTHCHECK info --require-gpu; no driver library copied in
  k8s/*.yaml   parse (python3-yaml); the Indexed Job's completion mode, restartPolicy Never, FailIndex on exit 42, GPU
               in limits only, the index variable; the merge Job runs facetrace merge; claims match the PVC
  slurm/, deadline/  bash -n; the array, --gres, --requeue, afterok; opencue/*.py compiles
  --facetrace BIN    also: every flag the recipes pass to `facetrace worker` / `facetrace merge` is in its --help
  --facetrace-mpi BIN  the same for `facetrace-mpi render` in slurm/render-mpi.sbatch

Usage: docker/check_recipes.py [--root DIR] [--facetrace BIN] [--facetrace-mpi BIN] [--self-test]
Exit status 0 when every check passes, 1 otherwise (each failure printed as "file: what").
"""
import argparse
import json
import os
import py_compile
import re
import subprocess
import sys
import tempfile

try:
    import yaml
except ImportError:  # python3-yaml is in scripts/setup; without it the YAML checks cannot run
    yaml = None


def instructions(text):
    """Dockerfile instructions as (KEYWORD, arguments), continuation lines joined, comments dropped."""
    out, cur = [], ""
    for line in text.splitlines():
        s = line.strip()
        if not cur and (not s or s.startswith("#")):
            continue
        cur += " " + s[:-1] if s.endswith("\\") else " " + s
        if not s.endswith("\\"):
            parts = cur.strip().split(None, 1)
            out.append((parts[0].upper(), parts[1] if len(parts) > 1 else ""))
            cur = ""
    return out


def check_dockerfile(text):
    errs = []
    ins = instructions(text)
    froms = [i for i, (k, _) in enumerate(ins) if k == "FROM"]
    if len(froms) < 2:
        return ["not multi-stage (needs a build stage and a runtime stage)"]
    args = {m.group(1): m.group(2) for k, a in ins if k == "ARG" for m in [re.match(r"(\w+)=(\S+)", a)] if m}
    if not re.fullmatch(r"13\.0\.\d+", args.get("CUDA", "")):
        errs.append("ARG CUDA=13.0.x missing")
    build, final = ins[froms[0]][1], ins[froms[-1]][1]
    if not re.match(r"nvidia/cuda:\$\{CUDA\}-cudnn-devel-(ubuntu24\.04|\$\{UBUNTU\})\s+AS\s+\w+", build, re.I):
        errs.append("the first stage is not nvidia/cuda:${CUDA}-cudnn-devel-ubuntu24.04 AS <name>")
    if not re.match(r"nvidia/cuda:\$\{CUDA\}-cudnn-runtime-(ubuntu24\.04|\$\{UBUNTU\})\s*$", final):
        errs.append("the last stage is not nvidia/cuda:${CUDA}-cudnn-runtime-ubuntu24.04")
    if "ubuntu24.04" not in args.get("UBUNTU", "ubuntu24.04"):
        errs.append("ARG UBUNTU is not ubuntu24.04")
    build_runs = " ".join(a for k, a in ins[froms[0]:froms[-1]] if k == "RUN")
    if "--preset release" not in build_runs:
        errs.append("the build stage does not configure the release preset (every farm architecture)")
    if not re.search(r"ctest\b[^&;]*-L cpu", build_runs):
        errs.append("the build stage does not run the cpu tests (ctest -L cpu)")
    final_ins = ins[froms[-1]:]
    users = [a.strip() for k, a in final_ins if k == "USER"]
    if not users or users[-1] in ("root", "0") or users[-1].startswith(("root:", "0:")):
        errs.append("the runtime stage does not switch to a non-root USER")
    envs = " ".join(a for k, a in final_ins if k == "ENV")
    if not re.search(r"NVIDIA_DRIVER_CAPABILITIES=compute,utility\b", envs):
        errs.append("NVIDIA_DRIVER_CAPABILITIES=compute,utility is not set in the runtime stage")
    entry = [a for k, a in final_ins if k == "ENTRYPOINT"]
    try:
        ep = json.loads(entry[-1]) if entry else []
    except json.JSONDecodeError:
        ep = []
    if not ep or ep[-1] != "facetrace" or not any(os.path.basename(x) == "tini" for x in ep):
        errs.append('ENTRYPOINT is not the exec form ["/usr/bin/tini", "--", "facetrace"]')
    health = [a for k, a in final_ins if k == "HEALTHCHECK"]
    if not health or not re.search(r'CMD\s+\[\s*"facetrace",\s*"info",\s*"--require-gpu"\s*\]', health[-1]):
        errs.append('no HEALTHCHECK ... CMD ["facetrace", "info", "--require-gpu"]')
    if not any(k == "COPY" and "--from=" in a for k, a in final_ins):
        errs.append("the runtime stage copies nothing from the build stage")
    if re.search(r"libcuda\.so|libnvidia-", " ".join(a for k, a in ins if k in ("COPY", "ADD"))):
        errs.append("a driver library is copied into the image (the host provides it)")
    return errs


def check_indexed_job(docs):
    errs = []
    jobs = [d for d in docs if d and d.get("kind") == "Job"]
    if len(jobs) != 1:
        return ["expected one Job"]
    spec = jobs[0].get("spec", {})
    pod = spec.get("template", {}).get("spec", {})
    if spec.get("completionMode") != "Indexed":
        errs.append("completionMode is not Indexed")
    if pod.get("restartPolicy") != "Never":
        errs.append("restartPolicy is not Never (backoffLimitPerIndex and podFailurePolicy need it)")
    rules = spec.get("podFailurePolicy", {}).get("rules", [])
    if not any(r.get("action") == "FailIndex" and 42 in r.get("onExitCodes", {}).get("values", [])
               and r.get("onExitCodes", {}).get("operator") == "In" for r in rules):
        errs.append("no podFailurePolicy rule FailIndex on exit code 42 (invalid job: never retried)")
    if "backoffLimitPerIndex" not in spec:
        errs.append("no backoffLimitPerIndex")
    containers = pod.get("containers", [])
    if not containers:
        return errs + ["no container"]
    c = containers[0]
    args = " ".join(str(a) for a in c.get("args", []))
    if not args.startswith("worker") or "--index-env=JOB_COMPLETION_INDEX" not in args:
        errs.append("the container does not run `worker --index-env=JOB_COMPLETION_INDEX`")
    res = c.get("resources", {})
    if "nvidia.com/gpu" not in res.get("limits", {}):
        errs.append("nvidia.com/gpu is not in resources.limits")
    req = res.get("requests", {}).get("nvidia.com/gpu")
    if req is not None and req != res.get("limits", {}).get("nvidia.com/gpu"):
        errs.append("a GPU request differs from the limit")
    return errs


def check_merge_job(docs):
    jobs = [d for d in docs if d and d.get("kind") == "Job"]
    if len(jobs) != 1:
        return ["expected one Job"]
    pod = jobs[0].get("spec", {}).get("template", {}).get("spec", {})
    errs = []
    runs_merge = False
    for c in pod.get("containers", []):
        args = [str(x) for x in c.get("args", [])]
        text = " ".join(str(x) for x in c.get("command", []) + args)
        # the image's entry point is facetrace: args [merge, ...] without a command run `facetrace merge`
        runs_merge |= "facetrace merge" in text or (not c.get("command") and args[:1] == ["merge"])
    if not runs_merge:
        errs.append("the merge Job does not run `facetrace merge`")
    if pod.get("restartPolicy") not in ("Never", "OnFailure"):
        errs.append("restartPolicy must be Never or OnFailure")
    return errs


def claims(docs):
    out = set()
    for d in docs:
        pod = (d or {}).get("spec", {}).get("template", {}).get("spec", {})
        for v in pod.get("volumes", []):
            if "persistentVolumeClaim" in v:
                out.add(v["persistentVolumeClaim"].get("claimName"))
    return out


def bash_syntax(path):
    r = subprocess.run(["bash", "-n", path], capture_output=True, text=True)
    return [] if r.returncode == 0 else ["bash -n: " + r.stderr.strip()]


def check_slurm(array_text, submit_text):
    errs = []
    for flag in ("--array=", "--gres=gpu:", "--requeue"):
        if not re.search(r"^#SBATCH\s+" + re.escape(flag), array_text, re.M):
            errs.append(f"render-array.sbatch: no #SBATCH {flag}")
    if "--index-env SLURM_ARRAY_TASK_ID" not in array_text or "exec facetrace worker" not in array_text:
        errs.append("render-array.sbatch: does not exec `facetrace worker --index-env SLURM_ARRAY_TASK_ID`")
    if "--dependency=afterok:" not in submit_text:
        errs.append("submit.sh: the merge is not queued with --dependency=afterok")
    return errs


# How the recipes spell a facetrace command: a shell line (with backslash continuations), a Python list, a YAML
# args list under the image's facetrace entry point, a Deadline -arguments string.
COMMAND_FORMS = [
    re.compile(r"facetrace\s+(worker|merge)\b((?:[^\n\\]|\\\n|\\.)*)"),
    re.compile(r'"facetrace",\s*"(worker|merge)"([^\]]*)\]'),
    re.compile(r"args:\s*\[\s*(worker|merge)\b([^\]]*)\]"),
    re.compile(r'-arguments\s+"(worker|merge)\b([^"]*)"'),
]


def recipe_flags(texts):
    """{subcommand: flags} passed to `facetrace worker` / `facetrace merge` in the recipes."""
    used = {"worker": set(), "merge": set()}
    for t in texts:
        for form in COMMAND_FORMS:
            for m in form.finditer(t):
                used[m.group(1)].update(re.findall(r"(--[a-z][a-z-]*)", m.group(2)))
    return used


MPI_FORM = re.compile(r"facetrace-mpi\s+render\b((?:[^\n\\]|\\\n|\\.)*)")


def check_cli_flags(exe, used, name="facetrace"):
    errs = []
    for sub, flags in used.items():
        try:
            r = subprocess.run([exe, sub, "--help"], capture_output=True, text=True, timeout=60)
        except OSError as e:
            return [f"cannot run {exe}: {e.strerror} (build it first)"]
        if r.returncode != 0:
            errs.append(f"`{name} {sub} --help` failed (exit {r.returncode})")
            continue
        for f in sorted(flags):
            if not re.search(re.escape(f) + r"(?![\w-])", r.stdout):
                errs.append(f"`{name} {sub}` has no {f}, which a recipe passes")
    return errs


def check(root, exe=None, mpi_exe=None):
    d = os.path.join(root, "docker")
    failures = []

    def read(rel):
        with open(os.path.join(d, rel), encoding="utf-8") as fh:
            return fh.read()

    def report(rel, errs):
        failures.extend(f"docker/{rel}: {e}" for e in errs)

    report("Dockerfile", check_dockerfile(read("Dockerfile")))
    if yaml is None:
        failures.append("python3-yaml is not installed: the k8s checks cannot run")
    else:
        docs = {}
        for rel in ("k8s/indexed-job.yaml", "k8s/merge-job.yaml", "k8s/parts-pvc.yaml"):
            try:
                docs[rel] = list(yaml.safe_load_all(read(rel)))
            except yaml.YAMLError as e:
                report(rel, [f"not valid YAML: {e}"])
        if "k8s/indexed-job.yaml" in docs:
            report("k8s/indexed-job.yaml", check_indexed_job(docs["k8s/indexed-job.yaml"]))
        if "k8s/merge-job.yaml" in docs:
            report("k8s/merge-job.yaml", check_merge_job(docs["k8s/merge-job.yaml"]))
        pvcs = {x.get("metadata", {}).get("name") for x in docs.get("k8s/parts-pvc.yaml", []) if x}
        for rel in ("k8s/indexed-job.yaml", "k8s/merge-job.yaml"):
            for c in claims(docs.get(rel, [])) - pvcs:
                report(rel, [f"claims {c}, which k8s/parts-pvc.yaml does not define"])
    for rel in ("slurm/render-array.sbatch", "slurm/merge.sbatch", "slurm/render-mpi.sbatch", "slurm/submit.sh",
                "deadline/submit_frame.sh"):
        report(rel, bash_syntax(os.path.join(d, rel)))
    report("slurm", check_slurm(read("slurm/render-array.sbatch"), read("slurm/submit.sh")))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            py_compile.compile(os.path.join(d, "opencue/submit_frame.py"), cfile=os.path.join(tmp, "x.pyc"),
                               doraise=True)
    except py_compile.PyCompileError as e:
        report("opencue/submit_frame.py", [str(e)])
    if exe:
        texts = [read(r) for r in ("k8s/indexed-job.yaml", "k8s/merge-job.yaml", "slurm/render-array.sbatch",
                                   "slurm/merge.sbatch", "opencue/submit_frame.py", "deadline/submit_frame.sh")]
        report("(recipes)", check_cli_flags(exe, recipe_flags(texts)))
    if mpi_exe:
        flags = set(re.findall(r"(--[a-z][a-z-]*)", " ".join(m.group(1) for m in MPI_FORM.finditer(
            read("slurm/render-mpi.sbatch")))))
        report("slurm/render-mpi.sbatch", check_cli_flags(mpi_exe, {"render": flags}, "facetrace-mpi"))
    return failures


def self_test():
    """Each planted defect must be reported; the repository's own recipes must not be."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(here, "docker", "Dockerfile"), encoding="utf-8") as fh:
        good = fh.read()
    bad = {
        "single stage": re.sub(r"(?s)^.*?(FROM nvidia/cuda:\$\{CUDA\}-cudnn-runtime)", r"ARG CUDA=13.0.1\n\1", good),
        "root user": good.replace("USER facetrace", "USER root"),
        "no tests": good.replace("-L cpu", "-L gpu"),
        "capabilities": good.replace("compute,utility", "utility"),
        "entrypoint": re.sub(r"ENTRYPOINT .*", 'ENTRYPOINT ["/bin/sh"]', good),
        "healthcheck": re.sub(r"HEALTHCHECK .*", "", good),
        "cuda 12": good.replace("ARG CUDA=13.0.1", "ARG CUDA=12.8.0"),
    }
    fails = 0
    if check_dockerfile(good):
        print("self-test: the good Dockerfile is reported:", check_dockerfile(good))
        fails += 1
    for name, text in bad.items():
        if not check_dockerfile(text):
            print(f"self-test: planted defect not reported: {name}")
            fails += 1
    if yaml is not None:
        with open(os.path.join(here, "docker", "k8s", "indexed-job.yaml"), encoding="utf-8") as fh:
            job = fh.read()
        for name, text in {"no FailIndex": job.replace("FailIndex", "Count"),
                           "restart": job.replace("restartPolicy: Never", "restartPolicy: OnFailure"),
                           "gpu request": job.replace("limits: {nvidia.com/gpu: 1}", "requests: {nvidia.com/gpu: 1}"),
                           "index": job.replace("JOB_COMPLETION_INDEX", "INDEX")}.items():
            if not check_indexed_job(list(yaml.safe_load_all(text))):
                print(f"self-test: planted defect not reported: {name}")
                fails += 1
    if check_slurm("#SBATCH --array=0-3\n#SBATCH --gres=gpu:1\nexec facetrace worker --index-env SLURM_ARRAY_TASK_ID",
                   "sbatch --dependency=afterok:1") == []:
        print("self-test: a Slurm array without --requeue is not reported")
        fails += 1
    sample = ('exec facetrace worker --job j --index-env X \\\n  --units-per-index 8 --out p\n--not-this\n'
              'args: [merge, /parts, --png=/p.png]\ncommand=["facetrace", "worker", "--index", "#IFRAME#"]\n')
    want = {"worker": {"--job", "--index-env", "--units-per-index", "--out", "--index"}, "merge": {"--png"}}
    if recipe_flags([sample]) != want:
        print("self-test: recipe_flags parsed", recipe_flags([sample]), "instead of", want)
        fails += 1
    print("self-test:", "ok" if fails == 0 else f"{fails} failure(s)")
    return 1 if fails else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p.add_argument("--facetrace", help="the facetrace binary, to check the flags the recipes pass")
    p.add_argument("--facetrace-mpi", help="the facetrace-mpi binary, to check the flags the MPI recipe passes")
    p.add_argument("--self-test", action="store_true")
    a = p.parse_args()
    if a.self_test:
        return self_test()
    failures = check(a.root, a.facetrace, a.facetrace_mpi)
    for f in failures:
        print(f)
    print(f"check_recipes: {'ok' if not failures else str(len(failures)) + ' failure(s)'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
