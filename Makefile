# make run   : set everything up, then run the local pipeline (embedded Kafka, store job, demo)
# make test  : set everything up, then lint and type-check (scripts/check.sh), run the JVM tests (jvm/test.sh) and the tests
.PHONY: setup run test unit check lock schemas clean

setup:
	bash scripts/setup.sh

run: setup
	.venv/bin/python -m tools.local_run

test:
	bash scripts/setup.sh --with-interop
	bash scripts/check.sh
	bash jvm/test.sh
	.venv/bin/python -m pytest -q

check: setup
	bash scripts/check.sh

unit: setup
	.venv/bin/python -m pytest -q tests/unit

schemas:
	.venv/bin/python -m schemas.generate

lock:
	.venv/bin/pip freeze --exclude-editable | grep -v '^waku-pipeline' > conf/constraints.tmp
	(sed -n '1,2p' conf/constraints.txt; cat conf/constraints.tmp) > conf/constraints.new
	mv conf/constraints.new conf/constraints.txt; rm -f conf/constraints.tmp

clean:
	rm -rf var/ .cache/py-files
