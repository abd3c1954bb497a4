.venv/bin/mpiexec -n 4 gossipgrad train -a gpt --layers 2 --hidden 64 --heads 2 --context 64 -b 8 --max-steps 200 -p 20 --no-progress --metrics-out lab/records/diloco/ddp.jsonl --strategy ddp
