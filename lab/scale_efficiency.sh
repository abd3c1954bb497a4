#!/usr/bin/env bash
# Statistical efficiency on the simulator, 8..1024 ranks (docs/scale.md; issue 41 item 3).
# Every run appends one JSON line to lab/records/scale/efficiency.jsonl; a run already
# there is skipped, so the script resumes where it stopped. First the core table at every
# size (allreduce and gossip on iid shards, gossip on sorted shards with and without the
# shuffle), then gossip-sync on sorted shards, then every other contender below 256 ranks,
# then AdamW and weak scaling at 8, 64 and 512 ranks.
#
#   nice -n 5 bash lab/scale_efficiency.sh
#   python -m lab scale-efficiency --table lab/records/scale/efficiency.jsonl
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=lab/records/scale/efficiency.jsonl
ALL=8,16,32,64,128,256,512,1024
run() { python -m lab scale-efficiency --out "$OUT" "$@"; }
for n in ${ALL//,/ }; do
    run --sizes "$n" --partitions iid --contenders allreduce,gossip
    run --sizes "$n" --partitions sorted,sorted+shuffle --contenders gossip
done
run --sizes $ALL --partitions sorted,sorted+shuffle --contenders gossip-sync
run --sizes 8,16,32,64,128
for opt in adamw; do
    run --sizes 8,64,512 --optimizers $opt --partitions iid --contenders allreduce,gossip
    run --sizes 8,64,512 --optimizers $opt --partitions sorted,sorted+shuffle --contenders gossip
done
run --sizes 8,64,512 --scalings weak --partitions iid --contenders allreduce,gossip
run --sizes 8,64,512 --scalings weak --partitions sorted,sorted+shuffle --contenders gossip
