.venv/bin/mpiexec -n 2 gossipgrad train -a gpt -b 16 --max-steps 200 -p 20 --no-progress --metrics-out lab/records/llm/gpt-2.jsonl
