#!/bin/bash
# One facetrace frame on Thinkbox Deadline 10 (docs/farm.md "Deadline"), through the stock CommandLine plugin:
# Deadline "frames" are work units 0..511, 8 per task; a task renders [<STARTFRAME>, <ENDFRAME> + 1). A second
# job, dependent on the first, merges the partials.
#   docker/deadline/submit_frame.sh /shared/jobs/job.json /shared/parts 512
set -euo pipefail
JOB=$1 PARTS=$2 UNITS=${3:-512}
out=$(deadlinecommand -SubmitCommandLineJob -name "facetrace frame" -frames "0-$((UNITS - 1))" -chunksize 8 \
        -executable /bin/sh \
        -arguments "-c \"exec facetrace worker --job $JOB --units <STARTFRAME>:\$((<ENDFRAME> + 1)) --out $PARTS\"")
echo "$out"
jid=$(printf '%s\n' "$out" | sed -n 's/^JobID=//p')
deadlinecommand -SubmitCommandLineJob -name "facetrace merge" -frames 0 -chunksize 1 -executable /bin/sh \
  -arguments "-c \"exec facetrace merge $PARTS/*.ftp --exr $PARTS/sums.exr --png $PARTS/frame.png\"" \
  -prop "JobDependencies=$jid"
