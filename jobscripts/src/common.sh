
# Fault tolerance (opt-in, AIPERF_FAULT_TOLERANCE=1): a dead rank costs its group, not the run.  It needs the
# launch Open MPI documents for it on Slurm, mpirun inside the allocation: its launcher (PRRTE) tells the
# other ranks (ULFM) and keeps them alive.  A direct srun does neither (measured: Slurm's PMIx plugin reports
# nothing to the ranks and ends the step; docs/cluster.md, "When a node fails"), so fault tolerance picks
# mpirun, and an explicit AIPERF_LAUNCHER=srun runs fail-fast, saying so.  The settings (from
# aiperf_mpi/mpi/launch_settings.py, which says why each): ULFM without its heartbeat detector (its start-up
# race crashed starts of 32 ranks and more, issue 38), the ob1 messaging layer (UCX's has no ULFM code; set
# here because a site's OMPI_MCA_pml would win over Open MPI's ft-mpi parameter set), no HAN collectives
# (not fault-tolerant across nodes: open-mpi/ompi#13915), a non-zero exit counted once by the launcher
# (PRRTE 3.0.x miscounts it and can end the job early), and --no-kill on the step that starts the launcher's
# daemons, so a failed node does not end the others.  MPICH ignores OMPI_MCA_* and runs as before.
LAUNCHER=${AIPERF_LAUNCHER:-srun} FT_MPIRUN=()
if [ "${AIPERF_FAULT_TOLERANCE:-0}" = 1 ]; then
    LAUNCHER=${AIPERF_LAUNCHER:-mpirun}
    if [ "$LAUNCHER" = mpirun ]; then
        @FT_OMPI_EXPORTS@
        @FT_PRTE_EXPORTS@
        FT_MPIRUN=(@FT_MPIRUN_OPTIONS@)
        echo "aiperf_mpi job $SLURM_JOB_ID: fault tolerance asked for (AIPERF_FAULT_TOLERANCE=1): launching with" \
             "mpirun inside the allocation, Open MPI's fault-tolerant launch on Slurm (rank 0's start line says" \
             "what a failure costs)"
    else
        echo "aiperf_mpi job $SLURM_JOB_ID: fault tolerance asked for (AIPERF_FAULT_TOLERANCE=1) but" \
             "AIPERF_LAUNCHER=$LAUNCHER: a direct srun reports no failure to the ranks, so this job runs" \
             "fail-fast (a dead rank ends it); leave AIPERF_LAUNCHER unset for mpirun" >&2
    fi
fi

if [ -n "${AIPERF_VENV:-}" ] && [ -n "${AIPERF_VENV_LOCAL:-}" ]; then
    # The venv onto every node's own disk: at thousands of ranks, each rank's imports from a parallel file
    # system are ≈ 33,000 metadata calls (TensorFlow's; BENCHMARKS.md, the rehearsals), all at once.  Here the
    # venv is packed once on this node, sbcast copies the one file to every node (Slurm's tree, not the file
    # system), and one task per node unpacks it into this job's own directory and deletes the file: at most
    # twice the venv's size on a node, for the moment of the unpacking.  The copy stays after the job
    # (jobscripts/README.md).
    milliseconds() { echo $(($(date +%s%N) / 1000000)); }
    seconds_since() { local ms=$(($(milliseconds) - $1)); echo "$((ms / 1000)).$((ms % 1000 / 100)) s"; }
    copy_began=$(milliseconds)
    VIRTUAL_ENV=$AIPERF_VENV_LOCAL/aiperf-venv-$SLURM_JOB_ID   # this job's own: never an older venv's files
    packed=$VIRTUAL_ENV.tar
    mkdir -p "$AIPERF_VENV_LOCAL"
    tar -C "$AIPERF_VENV/" -cf "$packed.src" .   # the venv's contents: AIPERF_VENV may be a symbolic link
    packed_bytes=$(stat -c %s "$packed.src")
    packing=$(seconds_since "$copy_began") sending_began=$(milliseconds)
    sbcast --force "$packed.src" "$packed"
    rm -f "$packed.src"
    sending=$(seconds_since "$sending_began") unpacking_began=$(milliseconds)
    srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --ntasks="$SLURM_JOB_NUM_NODES" bash -c \
        'mkdir -p "$1" && tar -C "$1" -xf "$1.tar" && rm -f "$1.tar" && echo "aiperf_mpi: the venv unpacked on $SLURMD_NODENAME"' \
        unpack "$VIRTUAL_ENV"
    # not bin/activate: it names the venv's original path; python -m reads the copy's pyvenv.cfg
    export VIRTUAL_ENV
    export PATH=$VIRTUAL_ENV/bin:$PATH
    echo "aiperf_mpi: the venv ($((packed_bytes / 1000000)) MB) copied to $VIRTUAL_ENV on $SLURM_JOB_NUM_NODES" \
         "node(s) in $(seconds_since "$copy_began"): packed $packing, sbcast $sending," \
         "unpacked $(seconds_since "$unpacking_began")"
elif [ -n "${AIPERF_VENV:-}" ]; then
    # shellcheck disable=SC1091
    source "$AIPERF_VENV/bin/activate"
fi
RUN_DIR=${AIPERF_RUN_DIR:-$SLURM_SUBMIT_DIR/runs/aiperf-$SLURM_JOB_ID}
GRACE=${AIPERF_GRACE:-120}
# the job's time left ([D-]HH:MM:SS or MM:SS, squeue's %L) in seconds; empty without squeue or a time limit
seconds_left() {
    local left days=0 seconds=0 part parts
    left=$(squeue -h -j "$SLURM_JOB_ID" -o %L 2>/dev/null || true)
    [[ $left =~ ^([0-9]+-)?[0-9:]+$ ]] || return 0
    if [[ $left == *-* ]]; then days=${left%%-*}; left=${left#*-}; fi
    IFS=: read -ra parts <<<"$left"
    for part in "${parts[@]}"; do seconds=$((seconds * 60 + 10#$part)); done
    echo $((days * 86400 + seconds))
}
# the benchmark's clock for a launch with this much time left: minus the warning and the start-up
clock_for() {
    local limit=$(($1 - WARN - START))
    if ((limit < $1 / 2)); then limit=$(($1 / 2)); fi  # a short test job: half of it
    echo "$limit"
}
TIME_LIMIT=${AIPERF_TIME_LIMIT:-}
if [ -z "$TIME_LIMIT" ]; then
    left=$(seconds_left)
    if [ -n "$left" ]; then
        TIME_LIMIT=$(clock_for "$left")
    else
        TIME_LIMIT=$((3600 - WARN))  # no squeue here, or no time limit: one hour
    fi
fi

# TensorFlow's threads: the cores of this task.  Slurm 22.05's srun no longer inherits
# --cpus-per-task from sbatch; SRUN_CPUS_PER_TASK passes it on.
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}
export SRUN_CPUS_PER_TASK=${SLURM_CPUS_PER_TASK:-1}
export PYTHONUNBUFFERED=1

mkdir -p "$(dirname "$RUN_DIR")"
echo "aiperf_mpi job $SLURM_JOB_ID: $SLURM_NTASKS tasks on $SLURM_JOB_NUM_NODES node(s), time limit ${TIME_LIMIT} s," \
     "grace ${GRACE} s, run directory $RUN_DIR"
echo "aiperf_mpi job $SLURM_JOB_ID: a lost node ends the launch; Slurm finds it after its SlurmdTimeout" \
     "($(scontrol show config 2>/dev/null | sed -n 's/^SlurmdTimeout *= *//p' || true)), the close scores the" \
     "segment, and the run is launched again with --resume on the nodes left, at most" \
     "${AIPERF_RELAUNCHES:-2} time(s) (AIPERF_RELAUNCHES), while ${AIPERF_RELAUNCH_LEAST:-600} s of the" \
     "allocation are left: a loss costs the groups' epochs in progress and a new start-up (docs/cluster.md)"
# AIPERF_ARGS is a list of options: split on spaces on purpose
# shellcheck disable=SC2206
RUN=(--time-limit "$TIME_LIMIT" --grace "$GRACE" --run-dir "$RUN_DIR")
case " ${AIPERF_ARGS:-} " in *" --layout "*) RUN=() ;; esac  # --layout runs nothing: run options would be refused
ARGS=("${RUN[@]}" "${SHAPE[@]}" ${AIPERF_ARGS:-})

# The start's and the end's own deadlines, outside MPI.  A rank stopped inside MPI_Init holds every other rank
# in MPI's start fence, where no thread of theirs runs: each rank's SIGALRM at --startup-deadline ends the
# waiting ones, which ends a fail-fast job, but with fault tolerance mpirun keeps a job whose ranks died and
# waits for the stopped one.  At the end, a rank stopped after its part of the last meeting, once the others
# have left MPI_Finalize, holds the launcher with no rank's deadline left to end it.  So a child of this shell
# reads what the run log gains (new bytes only: a resumed log may be large): no new run_start within the
# start-up bound and MARGIN, or the launcher still running the end's bound and MARGIN after the run_stop,
# and it says so in one line and ends the launcher (SIGTERM, then SIGKILL), which
# ends every rank, a stopped one too (docs/cluster.md, the failure table).  It leaves with the launcher.
# the benchmark's start-up and end bounds, as its options give them, or as it derives them for this job's size
# (aiperf_mpi/job/deadlines.py, their one home: no default is restated here; a failure ends the script)
# MARGIN: the watcher's seconds past the benchmark's own bound (the ranks start after the launcher, rank 0's abort
# takes its moment); CLOSE_BOUND: the close's
bounds=$(python -m aiperf_mpi.job.deadlines "${ARGS[@]}")
read -r startup_bound end_bound MARGIN CLOSE_BOUND <<<"$bounds"

# The launch, as this shell's child: once it has ended, this shell closes a run whose launch ended before
# rank 0 could write its score (below).  Before, the launcher was exec'd so that the time-limit warning reached
# it; now this shell passes the warning (SIGUSR1, sent to it alone: --signal=B:) and a SIGTERM on to it, and it
# keeps the close's verdict as the job's status.
launcher_command() {  # the launcher and its options for a launch on NODES nodes and TASKS tasks
    case $LAUNCHER in
        srun)
            # --mpi=pmix for Open MPI; pmi2 for MPICH / Intel MPI.  Without the right --mpi every task
            # would start as a world of one: aiperf_mpi refuses that launch with one line.  --kill-on-bad-exit=1:
            # when a rank dies, srun sends the others SIGTERM at once (0.1 s, measured), and on one node rank 0
            # writes the score; across nodes over TCP Open MPI aborts on the lost connection first and Slurm
            # SIGKILLs the step (0.15 s): rank 0 writes no score, and the close below writes it from the log
            # (docs/cluster.md, "A direct srun across nodes").  --wait: the ranks leave together after the end's
            # meeting, so once the first has ended the others get the end's own bound (a rank stopped after its
            # part of the last meeting, with no rank left waiting for it, would hold the step).  The nodes and
            # tasks are named: after a lost node the batch environment's counts are the allocation's old ones.
            LAUNCH=(srun --mpi=pmix --kill-on-bad-exit=1 --wait="$end_bound" --nodes="$1" --ntasks="$2") ;;
        mpirun)
            # Open MPI or MPICH mpirun read the allocation (the SLURM_* variables, set anew for a relaunch).
            # mpirun answers SIGTERM by killing the ranks at once, so with mpirun the warning above is what
            # lets the run write its score.
            LAUNCH=(mpirun -n "$2" --bind-to none "${FT_MPIRUN[@]}") ;;
        *)
            echo "AIPERF_LAUNCHER must be srun or mpirun, not '$AIPERF_LAUNCHER'" >&2
            exit 2 ;;
    esac
}

launcher=
trap '[ -z "$launcher" ] || kill -USR1 "$launcher" 2>/dev/null || true' USR1  # untrapped, bash would die of it
trap '[ -z "$launcher" ] || kill -TERM "$launcher" 2>/dev/null || true' TERM  # (set -e: a failed trap would end it)

launch_and_close() {  # one launch of the benchmark with "$@", its watcher, its end and its close; sets status
    "${LAUNCH[@]}" python -m aiperf_mpi "$@" &
    launcher=$!
    if [ ${#RUN[@]} -gt 0 ]; then
        (
            log=$RUN_DIR/events.jsonl
            offset=$(stat -c %s "$log" 2>/dev/null || echo 0)
            phase=start-up deadline=$((SECONDS + startup_bound + MARGIN)) bound=$startup_bound
            while kill -0 "$launcher" 2>/dev/null; do
                size=$(stat -c %s "$log" 2>/dev/null || echo 0)
                if [ "$size" -gt "$offset" ]; then
                    seen=$(tail -c +$((offset + 1)) "$log" | head -c $((size - offset)) \
                           | grep -o '^{"event":"run_st[a-z]*"' | tr '\n' ' ')
                    offset=$size
                    case $phase:$seen in
                        start-up:*run_start*) phase=run deadline= ;;
                    esac
                    case $phase:$seen in
                        run:*run_stop*) phase=end deadline=$((SECONDS + end_bound + MARGIN)) bound=$end_bound ;;
                    esac
                fi
                if [ -n "$deadline" ] && [ "$SECONDS" -ge "$deadline" ]; then
                    echo "aiperf_mpi job $SLURM_JOB_ID: the launch outlived the run's $phase deadline (${bound} s +" \
                         "${MARGIN} s): a rank hangs where no rank's own deadline reaches it; ending the launcher" \
                         "($([ "$phase" = start-up ] && echo 'nothing was measured: launch again' \
                             || echo 'the log is whole; score.json is there if rank 0 wrote it'))" >&2
                    kill -TERM "$launcher" 2>/dev/null
                    for _ in $(seq 30); do kill -0 "$launcher" 2>/dev/null || exit 0; sleep 1; done
                    kill -KILL "$launcher" 2>/dev/null
                    exit 0
                fi
                sleep 5
            done
        ) &
    fi
    # The launcher's end.  wait returns early when a trapped signal arrives (the launcher still runs): wait again.
    status=0
    wait "$launcher" || status=$?
    while kill -0 "$launcher" 2>/dev/null; do status=0; wait "$launcher" || status=$?; done
    # A launch that ended before rank 0 wrote the run's score (a rank's death across nodes under a direct srun, a
    # lost node, rank 0 stopped and ended by its watchers): the score from the log, which is whole up to the end
    # (every epoch is on disk before the next), by one process here, with a run_stop that says so (reason
    # "launch ended", aiperf_mpi/job/close.py); a run that ended with its score, or whose lock a live rank 0
    # still holds, is left as it is.  Bounded: on a file system that stalls (what may have ended the run: rank
    # 0's --io-deadline) the close would wait with it, and hold the allocation; past CLOSE_BOUND it is left, in
    # one line, and the same command scores the run later.
    # The job's status is the close's (--job-status), not the launcher's: srun exits 0 for a step that never
    # launched and prterun after losing a daemon, so 0 only for a run that scored and stopped at its time limit
    # or model budget; 6 for no score, 7 for a run that stopped early (--resume continues it), one line each.
    if [ ${#RUN[@]} -gt 0 ]; then
        python -m aiperf_mpi.job.close "$RUN_DIR" --launcher-status "$status" --job-status &
        closer=$!
        for _ in $(seq $CLOSE_BOUND); do kill -0 "$closer" 2>/dev/null || break; sleep 1; done
        if kill -0 "$closer" 2>/dev/null; then
            echo "aiperf_mpi job $SLURM_JOB_ID: the close of $RUN_DIR did not end within ${CLOSE_BOUND} s (its" \
                 "file system?): left; python -m aiperf_mpi.job.close $RUN_DIR scores the run later; job status 6" >&2
            kill -KILL "$closer" 2>/dev/null || true
            status=6
            return
        fi
        status=0
        wait "$closer" || status=$?
    fi
}

allocation_nodes() {  # the nodes the allocation holds now (Slurm takes a failed node out of a --no-kill job)
    scontrol show job "$SLURM_JOB_ID" 2>/dev/null | tr ' ' '\n' | sed -n 's/^NodeList=//p' | head -n 1
}

NODES_AT_START=$SLURM_JOB_NUM_NODES
TASKS_PER_NODE=$((SLURM_NTASKS / SLURM_JOB_NUM_NODES))
launcher_command "$SLURM_JOB_NUM_NODES" "$SLURM_NTASKS"
began=$SECONDS
launch_and_close "${ARGS[@]}"

# A lost node costs its groups' work in progress, not the allocation (issue 50): with --no-kill Slurm keeps the
# job and takes the failed node out of it, but every launch ends (srun's step loses a task; PRRTE cannot keep a
# job whose daemon is lost).  Once the close has scored the segment, the run is launched again with --resume on
# the nodes left, as many tasks a node as before, its clock what the allocation has left, at most
# AIPERF_RELAUNCHES times (python -m aiperf_mpi.job.relaunch decides, and says why in one line).  Its score
# spans every segment; verify reads the relaunch as a resumed segment with fewer ranks.
relaunches=0
while [ ${#RUN[@]} -gt 0 ]; do
    nodes=$(allocation_nodes || true)  # a busy slurmctld must not end the script (set -e): no relaunch then
    count=0
    if [ -n "$nodes" ]; then count=$(scontrol show hostnames "$nodes" 2>/dev/null | wc -l || true); fi
    left=$(seconds_left)
    python -m aiperf_mpi.job.relaunch --status "$status" --nodes-at-start "$NODES_AT_START" \
        --nodes-now "$count" --relaunches "$relaunches" --most "${AIPERF_RELAUNCHES:-2}" \
        --seconds-left "${left:-0}" --least "${AIPERF_RELAUNCH_LEAST:-600}" || break
    # its clock: what the allocation has left (as at the start), and no more of AIPERF_TIME_LIMIT than is left
    clock=$(clock_for "${left:-0}")
    if [ -n "${AIPERF_TIME_LIMIT:-}" ] && ((AIPERF_TIME_LIMIT - (SECONDS - began) < clock)); then
        clock=$((AIPERF_TIME_LIMIT - (SECONDS - began)))
    fi
    if ((clock < 30)); then
        echo "aiperf_mpi job $SLURM_JOB_ID: no relaunch: ${clock} s of the run's clock left" >&2
        break
    fi
    relaunches=$((relaunches + 1))
    tasks=$((count * TASKS_PER_NODE))
    # the allocation as it is now, for srun's defaults and mpirun's reading of it
    export SLURM_JOB_NODELIST=$nodes SLURM_NODELIST=$nodes SLURM_JOB_NUM_NODES=$count SLURM_NNODES=$count \
           SLURM_NTASKS=$tasks SLURM_NPROCS=$tasks SLURM_TASKS_PER_NODE="$TASKS_PER_NODE(x$count)"
    if [ -n "${SLURM_JOB_CPUS_PER_NODE:-}" ]; then
        export SLURM_JOB_CPUS_PER_NODE="${SLURM_JOB_CPUS_PER_NODE%%(*}(x$count)"
    fi
    # a variable, not a process substitution: a failure here must end the script (set -e), never relaunch bare
    resume_text=$(python -m aiperf_mpi.cli resume-arguments "$RUN_DIR" "$clock" -- "${ARGS[@]}")
    mapfile -t RESUME <<<"$resume_text"
    if [ "${RESUME[0]:-}" != --resume ]; then
        echo "aiperf_mpi job $SLURM_JOB_ID: no relaunch: the relaunch's options could not be made" >&2
        break
    fi
    echo "aiperf_mpi job $SLURM_JOB_ID: relaunch $relaunches on $count node(s) ($nodes), $tasks tasks:" \
         "python -m aiperf_mpi ${RESUME[*]}"
    launcher_command "$count" "$tasks"
    launch_and_close "${RESUME[@]}"
done
exit "$status"
