#!/bin/bash
# One facetrace frame on Thinkbox Deadline 10 (docs/farm.md "Deadline"), through the stock CommandLine plugin:
# Deadline "frames" are worker indices 0..TASKS-1, one per task; task i renders work units [8i, 8i + 8). A second
# job, dependent on the first, merges the partials (a directory argument stands for its *.ftp files).
#   docker/deadline/submit_frame.sh /shared/jobs/job.json /shared/parts 64
set -euo pipefail
JOB=$1 PARTS=$2 TASKS=${3:-64}
out=$(deadlinecommand -SubmitCommandLineJob -name "facetrace frame" -frames "0-$((TASKS - 1))" -chunksize 1 \
        -executable facetrace \
        -arguments "worker --job $JOB --index <STARTFRAME> --units-per-index 8 --out $PARTS")
echo "$out"
jid=$(printf '%s\n' "$out" | sed -n 's/^JobID=//p')
deadlinecommand -SubmitCommandLineJob -name "facetrace merge" -frames 0 -chunksize 1 -executable facetrace \
  -arguments "merge $PARTS --exr $PARTS/sums.exr --png $PARTS/frame.png" -prop "JobDependencies=$jid"
