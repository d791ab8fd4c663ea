#!/bin/bash
# Queues one frame: the render array, then the merge once every array task succeeded (afterok waits for all).
#   docker/slurm/submit.sh job.json            (run from the directory that will hold parts/, out/ and logs/)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export FACETRACE_JOB=${1:-job.json}
mkdir -p logs
jid=$(sbatch --parsable --export=ALL "$here/render-array.sbatch")
jid=${jid%%;*}   # "<id>;<cluster>" on multi-cluster sites
sbatch --parsable --export=ALL --dependency=afterok:"$jid" "$here/merge.sbatch"
echo "render array $jid; merge queued after it"
