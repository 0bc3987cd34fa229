#!/usr/bin/env bash
# A real one-node Slurm cluster on this machine, for tests and the demo.
#
#   scripts/slurm_local.sh up       start munged, MariaDB, slurmdbd, slurmctld,
#                                   slurmd; wait until the node is idle and
#                                   sacct answers (no-op when already up)
#   scripts/slurm_local.sh down     cancel all jobs, stop the daemons it started
#   scripts/slurm_local.sh env      print `export SLURM_CONF=...`; use as
#                                   eval "$(scripts/slurm_local.sh env)"
#   scripts/slurm_local.sh status   say whether sinfo answers (exit 0 if so)
#   scripts/slurm_local.sh clean    down, then delete the state dir
#
# Runs as root, without systemd. All state (configs, pid files, logs, spool,
# MariaDB data, munge socket) lives in one directory:
#   PREFLIGHT_SLURM_DIR      state dir            (default /tmp/preflight-slurm)
#   PREFLIGHT_SLURM_TIMEOUT  seconds per wait     (default 60)
#   PREFLIGHT_SLURM_DB_PORT  MariaDB TCP port     (default 3307, bound to
#                            127.0.0.1 only; not 3306 so a system MariaDB can
#                            run alongside)
#   PREFLIGHT_SLURM_PORT     slurmctld port; slurmd uses +1, slurmdbd +2
#                            (default 6817, i.e. Slurm's defaults 6817-6819)
# A second cluster can run next to the first with its own state dir and ports.
# Needs the packages from scripts/install_system.sh.
set -euo pipefail

if [[ ${EUID} -ne 0 ]]; then
    echo "slurm_local: must run as root" >&2
    exit 1
fi

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TEMPLATE_DIR="${REPO_ROOT}/slurm/local"

STATE_DIR="${PREFLIGHT_SLURM_DIR:-/tmp/preflight-slurm}"
TIMEOUT="${PREFLIGHT_SLURM_TIMEOUT:-60}"
DB_PORT="${PREFLIGHT_SLURM_DB_PORT:-3307}"
CTLD_PORT="${PREFLIGHT_SLURM_PORT:-6817}"
CLUSTER=preflight
ACCOUNT=preflight

# The state dir ends up inside config files, so keep it to plain path
# characters (no spaces, newlines, quotes, '@').
if [[ ! "${STATE_DIR}" =~ ^/[A-Za-z0-9._/-]+$ ]]; then
    echo "slurm_local: PREFLIGHT_SLURM_DIR must be an absolute path of [A-Za-z0-9._/-], got '${STATE_DIR}'" >&2
    exit 2
fi
STATE_DIR="${STATE_DIR%/}"
[[ "${TIMEOUT}" =~ ^[0-9]+$ ]] || { echo "slurm_local: PREFLIGHT_SLURM_TIMEOUT must be an integer" >&2; exit 2; }
[[ "${DB_PORT}" =~ ^[0-9]+$ ]] || { echo "slurm_local: PREFLIGHT_SLURM_DB_PORT must be an integer" >&2; exit 2; }
[[ "${CTLD_PORT}" =~ ^[0-9]+$ ]] || { echo "slurm_local: PREFLIGHT_SLURM_PORT must be an integer" >&2; exit 2; }
SLURMD_PORT=$((CTLD_PORT + 1))
DBD_PORT=$((CTLD_PORT + 2))

ETC_DIR="${STATE_DIR}/etc"
RUN_DIR="${STATE_DIR}/run"          # our pid files, one per daemon we started
LOG_DIR="${STATE_DIR}/log"
SPOOL_DIR="${STATE_DIR}/spool"
MUNGE_DIR="${STATE_DIR}/munge"      # owned by munge: munged refuses other owners
MUNGE_SOCKET="${MUNGE_DIR}/munge.socket.2"
DB_DIR="${STATE_DIR}/mariadb"       # owned by mysql: datadir, socket, pid, log
DB_SOCKET="${DB_DIR}/mariadb.sock"
DB_LOG="${DB_DIR}/mariadb.log"

# Every Slurm command below (and in any shell that evals `env`) uses this.
export SLURM_CONF="${ETC_DIR}/slurm.conf"

# Start order (`down` stops them in reverse, in stages).
DAEMONS=(munged mariadbd slurmdbd slurmctld slurmd)

log() { echo "slurm_local: $*" >&2; }

daemon_log() {
    case "$1" in
        munged) echo "${MUNGE_DIR}/munged.log" ;;
        mariadbd) echo "${DB_LOG}" ;;
        *) echo "${LOG_DIR}/$1.log" ;;
    esac
}

# die MESSAGE [LOGFILE...]: print the message, the tail of each log, exit 1.
die() {
    local msg="$1"; shift
    log "ERROR: ${msg}"
    local f
    for f in "$@"; do
        if [[ -s "${f}" ]]; then
            echo "----- last 30 lines of ${f} -----" >&2
            tail -n 30 "${f}" >&2
        fi
    done
    for f in "${LOG_DIR}"/*.stdout; do
        if [[ -s "${f}" ]]; then
            echo "----- last 10 lines of ${f} -----" >&2
            tail -n 10 "${f}" >&2
        fi
    done
    log "state is in ${STATE_DIR}; run '$0 down' to stop what was started"
    exit 1
}

# running_pid NAME: print the PID from our pid file if that process is still
# alive and still is NAME (guards against a recycled PID); else fail.
running_pid() {
    local name="$1" pidfile="${RUN_DIR}/$1.pid" pid comm
    [[ -r "${pidfile}" ]] || return 1
    pid="$(<"${pidfile}")"
    [[ "${pid}" =~ ^[0-9]+$ ]] || return 1
    comm="$(ps -o comm= -p "${pid}" 2>/dev/null)" || return 1
    # ps truncates comm to 15 characters.
    [[ "${comm}" == "${name:0:15}" ]] || return 1
    echo "${pid}"
}

# started_alive NAME: is the process we just started still there? (Plain PID
# check: right after the start its name may still be setsid/setpriv.)
started_alive() {
    local pid
    pid="$(<"${RUN_DIR}/$1.pid")" && kill -0 "${pid}" 2>/dev/null
}

# start_daemon NAME CMD...: run CMD (which must stay in the foreground) in its
# own session, detached from our stdin/stdout, and record its PID.
# In a non-interactive script the background job is not a process group
# leader, so setsid(1) does not fork and $! is the daemon's own PID.
# fd 9 is closed so that the daemon does not keep holding our lock.
start_daemon() {
    local name="$1"; shift
    setsid "$@" </dev/null >>"${LOG_DIR}/${name}.stdout" 2>&1 9>&- &
    echo "$!" >"${RUN_DIR}/${name}.pid"
}

# Serialise up/down/clean on one state dir (e.g. parallel test sessions).
take_lock() {
    mkdir -p "${STATE_DIR}"
    exec 9>"${STATE_DIR}/.lock"
    flock -w $((TIMEOUT * 3)) 9 || die "another slurm_local.sh holds ${STATE_DIR}/.lock"
}

# wait_until NAME DESCRIPTION CMD...: retry CMD until it succeeds; fail early
# (with the daemon's log) if the daemon NAME died, or after TIMEOUT seconds.
wait_until() {
    local name="$1" what="$2"; shift 2
    local deadline=$((SECONDS + TIMEOUT))
    while true; do
        if "$@" >/dev/null 2>&1; then
            return 0
        fi
        if ! started_alive "${name}"; then
            die "${name} exited while waiting for ${what}" "$(daemon_log "${name}")"
        fi
        if ((SECONDS >= deadline)); then
            die "timed out after ${TIMEOUT}s waiting for ${what}" "$(daemon_log "${name}")"
        fi
        sleep 0.5
    done
}

# render TEMPLATE OUTPUT MODE KEY=VALUE...: replace each @KEY@ with VALUE.
# Plain string substitution, nothing is evaluated by the shell.
render() {
    local template="$1" output="$2" mode="$3"; shift 3
    local content kv key value
    content="$(<"${template}")"
    for kv in "$@"; do
        key="${kv%%=*}"
        value="${kv#*=}"
        # Quoted replacement: bash 5.2 would otherwise expand '&' in it.
        content="${content//"@${key}@"/"${value}"}"
    done
    if [[ "${content}" =~ @[A-Z_]+@ ]]; then
        die "unfilled placeholder ${BASH_REMATCH[0]} in ${template}"
    fi
    # Write with the final mode from the start (slurmdbd.conf holds a password).
    (umask 077 && printf '%s\n' "${content}" >"${output}.tmp")
    chmod "${mode}" "${output}.tmp"
    mv -f "${output}.tmp" "${output}"
}

# Bounded client calls: a Slurm command against a dead daemon can retry for a
# long time.
q() { timeout 15 "$@"; }

# One-node cluster: the first (only) node's state, e.g. "idle".
node_state() { q sinfo -h -N -o '%T' 2>/dev/null | head -n 1; }
sinfo_answers() { q sinfo -h -o '%P' >/dev/null 2>&1; }
sacct_answers() { q sacct -n -X -S now-1minutes -o JobID >/dev/null 2>&1; }
munge_answers() { munge -n --socket="${MUNGE_SOCKET}" | unmunge --socket="${MUNGE_SOCKET}"; }
db_answers() { mariadb-admin --no-defaults --socket="${DB_SOCKET}" -u root ping; }
dbd_answers() { q sacctmgr -n -P show cluster format=Cluster; }
ctld_answers() { q scontrol ping | grep -q 'is UP'; }

is_up() {
    [[ -r "${SLURM_CONF}" ]] || return 1
    # Cheap check first: a Slurm client retries for ~10 s when slurmctld is
    # not there.
    local name
    for name in "${DAEMONS[@]}"; do
        running_pid "${name}" >/dev/null || return 1
    done
    local state
    state="$(node_state)"
    # Up and usable: node answers in a schedulable state and accounting works.
    [[ "${state}" =~ ^(idle|mixed|allocated|completing)$ ]] && sacct_answers
}

any_running() {
    local name
    for name in "${DAEMONS[@]}"; do
        running_pid "${name}" >/dev/null && return 0
    done
    return 1
}

write_configs() {
    # NodeName line as slurmd detects it ("NodeName=vm CPUs=2 ... RealMemory=N"),
    # with RealMemory lowered by 2%: if slurmd later detects less memory than
    # configured (memory ballooning), it drains the node as "Low RealMemory".
    local node_line mem
    node_line="$(slurmd -C | head -n 1)"
    [[ "${node_line}" =~ ^NodeName=([^[:space:]]+)\ .*RealMemory=([0-9]+) ]] \
        || die "unexpected 'slurmd -C' output: ${node_line}"
    NODE_NAME="${BASH_REMATCH[1]}"
    mem="${BASH_REMATCH[2]}"
    node_line="${node_line/RealMemory=${mem}/RealMemory=$((mem * 98 / 100))}"

    # One random database password per state dir, kept for later `up`s.
    local pass_file="${ETC_DIR}/db_password"
    if [[ ! -s "${pass_file}" ]]; then
        (umask 077 && od -An -tx1 -N16 /dev/urandom | tr -d ' \n' >"${pass_file}")
    fi
    DB_PASS="$(<"${pass_file}")"

    local common=(
        "STATE_DIR=${STATE_DIR}"
        "CLUSTER=${CLUSTER}"
        "MUNGE_SOCKET=${MUNGE_SOCKET}"
        "DBD_PORT=${DBD_PORT}"
        "CTLD_PORT=${CTLD_PORT}"
        "SLURMD_PORT=${SLURMD_PORT}"
    )
    render "${TEMPLATE_DIR}/slurm.conf.in" "${ETC_DIR}/slurm.conf" 644 \
        "${common[@]}" "HOST=${NODE_NAME}" "NODE_LINE=${node_line}"
    render "${TEMPLATE_DIR}/slurmdbd.conf.in" "${ETC_DIR}/slurmdbd.conf" 600 \
        "${common[@]}" "DB_PORT=${DB_PORT}" "DB_PASS=${DB_PASS}"
}

make_dirs() {
    mkdir -p "${STATE_DIR}" "${ETC_DIR}" "${RUN_DIR}" "${LOG_DIR}" \
        "${SPOOL_DIR}/slurmctld" "${SPOOL_DIR}/slurmd" "${MUNGE_DIR}" "${DB_DIR}"
    # munged and mariadbd run as their own users and must reach their dirs.
    chmod 755 "${STATE_DIR}"
    chown munge:munge "${MUNGE_DIR}"
    chmod 755 "${MUNGE_DIR}"      # munged wants the socket dir world-executable
    chown mysql:mysql "${DB_DIR}"
    chmod 750 "${DB_DIR}"
}

start_munge() {
    local key=/etc/munge/munge.key
    if [[ ! -s "${key}" ]]; then
        log "creating ${key}"
        mkdir -p /etc/munge
        (umask 077 && dd if=/dev/urandom of="${key}" bs=1 count=1024 status=none)
        chown -R munge:munge /etc/munge
        chmod 700 /etc/munge
        chmod 400 "${key}"
    fi
    # munged refuses to run as root with a key owned by munge, so run it as
    # munge; setpriv execs (no fork), so the recorded PID is munged's.
    start_daemon munged setpriv --reuid=munge --regid=munge --init-groups \
        munged --foreground --socket="${MUNGE_SOCKET}" \
        --pid-file="${MUNGE_DIR}/munged.pid" --log-file="${MUNGE_DIR}/munged.log" \
        --seed-file="${MUNGE_DIR}/munged.seed" --key-file="${key}"
    wait_until munged "munge credentials" munge_answers
}

start_mariadb() {
    local datadir="${DB_DIR}/data"
    if [[ ! -d "${datadir}/mysql" ]]; then
        log "initialising MariaDB datadir ${datadir}"
        rm -rf "${datadir}"
        # root@localhost authenticates by unix socket: no root password.
        mariadb-install-db --no-defaults --user=mysql --datadir="${datadir}" \
            --auth-root-authentication-method=socket --skip-test-db \
            >"${LOG_DIR}/mariadb-install.log" 2>&1 \
            || die "mariadb-install-db failed" "${LOG_DIR}/mariadb-install.log"
    fi
    # --no-defaults: ignore /etc/mysql (system instance settings, port 3306).
    # InnoDB values are the ones slurmdbd recommends (it logs an error below
    # half of them); the buffer pool is only virtual until it is used.
    start_daemon mariadbd mariadbd --no-defaults --user=mysql \
        --datadir="${datadir}" --socket="${DB_SOCKET}" \
        --pid-file="${DB_DIR}/mariadb.pid" --log-error="${DB_LOG}" \
        --bind-address=127.0.0.1 --port="${DB_PORT}" --skip-name-resolve \
        --innodb-buffer-pool-size=1024M --innodb-log-file-size=64M \
        --innodb-lock-wait-timeout=900
    wait_until mariadbd "MariaDB on ${DB_SOCKET}" db_answers

    # DB_PASS is hex, so it is safe inside the SQL string.
    mariadb --no-defaults --socket="${DB_SOCKET}" -u root <<SQL \
        || die "creating the slurm database user failed" "${DB_LOG}"
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '${DB_PASS}';
ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '${DB_PASS}';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
SQL
}

# Cluster, account and root user in slurmdbd, so jobs are accounted.
register_accounting() {
    if [[ -z "$(q sacctmgr -n -P show cluster "${CLUSTER}" format=Cluster)" ]]; then
        q sacctmgr -i add cluster "${CLUSTER}" >/dev/null
    fi
    if [[ -z "$(q sacctmgr -n -P show account "${ACCOUNT}" format=Account)" ]]; then
        q sacctmgr -i add account "${ACCOUNT}" Cluster="${CLUSTER}" \
            Description="hpc-preflight local" Organization=preflight >/dev/null
    fi
    if [[ -z "$(q sacctmgr -n -P show assoc cluster="${CLUSTER}" account="${ACCOUNT}" user=root format=User)" ]]; then
        q sacctmgr -i add user root Account="${ACCOUNT}" DefaultAccount="${ACCOUNT}" \
            Cluster="${CLUSTER}" >/dev/null
    fi
}

wait_node_idle() {
    local deadline=$((SECONDS + TIMEOUT)) state resumed=0
    while true; do
        state="$(node_state)"
        [[ "${state}" == idle ]] && return 0
        # Jobs kept over from before `down` (it cancels jobs, but slurmctld
        # may have died first) legitimately keep the node busy.
        if [[ "${state}" =~ ^(mixed|allocated|completing)$ \
              && -n "$(q squeue -h -t running,completing -o '%A' 2>/dev/null)" ]]; then
            log "node ${NODE_NAME} is ${state} with jobs recovered from an earlier run: $(q squeue -h -t running,completing -o '%A' | tr '\n' ' ')"
            return 0
        fi
        # Kept-over state may hold the node down/drained (e.g. it vanished
        # when the cluster was stopped); slurmd is running now, so resume it.
        if [[ ${resumed} -eq 0 && "${state}" =~ ^(down|drain|drained|draining|fail|failing) ]]; then
            log "node ${NODE_NAME} is ${state}; resuming it"
            q scontrol update NodeName="${NODE_NAME}" State=RESUME >/dev/null 2>&1 || true
            resumed=1
        fi
        started_alive slurmd || die "slurmd exited" "${LOG_DIR}/slurmd.log"
        started_alive slurmctld || die "slurmctld exited" "${LOG_DIR}/slurmctld.log"
        if ((SECONDS >= deadline)); then
            die "timed out after ${TIMEOUT}s waiting for node ${NODE_NAME} to be idle (state: '${state:-no answer}')" \
                "${LOG_DIR}/slurmctld.log" "${LOG_DIR}/slurmd.log"
        fi
        sleep 0.5
    done
}

cmd_up() {
    local started=${SECONDS}
    if is_up; then
        log "already up (SLURM_CONF=${SLURM_CONF})"
        return 0
    fi
    if any_running; then
        log "found a partly running cluster; stopping it first"
        cmd_down
    fi
    local bin
    for bin in munged munge mariadbd mariadb-install-db slurmdbd slurmctld slurmd sacctmgr setpriv; do
        command -v "${bin}" >/dev/null || die "${bin} not found; run scripts/install_system.sh"
    done

    make_dirs
    write_configs
    # Daemons inherit our working directory; do not pin the caller's.
    cd "${STATE_DIR}"

    start_munge
    log "munged ready ($((SECONDS - started))s)"
    start_mariadb
    log "MariaDB ready ($((SECONDS - started))s)"

    # slurmdbd has no -f: it reads slurmdbd.conf next to $SLURM_CONF.
    start_daemon slurmdbd slurmdbd -D
    wait_until slurmdbd "slurmdbd (sacctmgr)" dbd_answers
    register_accounting
    log "slurmdbd ready, cluster ${CLUSTER} registered ($((SECONDS - started))s)"

    # -i: start even if saved state from an earlier run cannot be read.
    start_daemon slurmctld slurmctld -D -i -f "${SLURM_CONF}"
    wait_until slurmctld "slurmctld (scontrol ping)" ctld_answers
    log "slurmctld ready ($((SECONDS - started))s)"

    start_daemon slurmd slurmd -D -f "${SLURM_CONF}"
    wait_node_idle
    wait_until slurmdbd "sacct" sacct_answers

    log "up in $((SECONDS - started))s; node ${NODE_NAME} idle, partition debug"
    log "use: eval \"\$($0 env)\""
}

# stop_daemons NAME...: SIGTERM the PIDs we recorded for these daemons, wait
# for all of them (30 s: MariaDB may flush for a while), then SIGKILL.
stop_daemons() {
    local name pid i
    local -A pids=()
    for name in "$@"; do
        if pid="$(running_pid "${name}")"; then
            pids["${name}"]="${pid}"
            kill -TERM "${pid}" 2>/dev/null || true
        fi
    done
    for ((i = 0; i < 150; i++)); do
        for name in "${!pids[@]}"; do
            if ! kill -0 "${pids[${name}]}" 2>/dev/null; then
                log "stopped ${name} (pid ${pids[${name}]})"
                unset "pids[${name}]"
            fi
        done
        [[ ${#pids[@]} -eq 0 ]] && break
        sleep 0.2
    done
    for name in "${!pids[@]}"; do
        log "${name} (pid ${pids[${name}]}) ignored SIGTERM; sending SIGKILL"
        kill -KILL "${pids[${name}]}" 2>/dev/null || true
    done
    for name in "$@"; do
        rm -f "${RUN_DIR}/${name}.pid"
    done
}

# descendants PID: print the PIDs of all processes below PID.
descendants() {
    local child
    for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do
        echo "${child}"
        descendants "${child}"
    done
}

cmd_down() {
    # Cancel every job first: their slurmstepd processes are not children of
    # slurmd and would keep running after the daemons are gone.
    if running_pid slurmctld >/dev/null && ctld_answers; then
        local jobs i
        jobs="$(q squeue -h -o '%A' 2>/dev/null || true)"
        if [[ -n "${jobs}" ]]; then
            log "cancelling jobs: ${jobs//$'\n'/ }"
            # shellcheck disable=SC2086  # one job id per word
            q scancel ${jobs} 2>/dev/null || true
            for ((i = 0; i < 40; i++)); do
                [[ -z "$(q squeue -h -t running,completing -o '%A' 2>/dev/null)" ]] && break
                sleep 0.5
            done
        fi
    fi
    # slurmctld sends its last records to slurmdbd, which needs MariaDB and
    # munged, so stop in three stages.
    stop_daemons slurmd slurmctld
    stop_daemons slurmdbd
    stop_daemons mariadbd munged
    # Steps that outlived the cancel (e.g. slurmctld was already dead): each
    # slurmstepd of our slurmd listens on a socket in our SlurmdSpoolDir; ss
    # names its PID. Other clusters' slurmstepd processes are left alone.
    local pid
    for pid in $(ss -Hxlp 2>/dev/null | grep -F " ${SPOOL_DIR}/slurmd/" \
                 | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u); do
        [[ "$(ps -o comm= -p "${pid}" 2>/dev/null)" == slurmstepd ]] || continue
        log "killing leftover slurmstepd (pid ${pid}) and its job processes"
        # shellcheck disable=SC2046  # one PID per word
        kill -KILL "${pid}" $(descendants "${pid}") 2>/dev/null || true
    done
    log "down"
}

cmd_env() {
    printf 'export SLURM_CONF=%q\n' "${SLURM_CONF}"
}

cmd_status() {
    # Skip sinfo (which retries for ~10 s) when our slurmctld is not running.
    if [[ -r "${SLURM_CONF}" ]] && running_pid slurmctld >/dev/null && sinfo_answers; then
        echo "up: sinfo answers (SLURM_CONF=${SLURM_CONF})"
        q sinfo -N -o '%N %P %T %c %m' || true
        return 0
    fi
    echo "down: sinfo does not answer (SLURM_CONF=${SLURM_CONF})"
    local name pid
    for name in "${DAEMONS[@]}"; do
        if pid="$(running_pid "${name}")"; then
            echo "  but ${name} is running (pid ${pid})"
        fi
    done
    return 1
}

cmd_clean() {
    cmd_down
    log "removing ${STATE_DIR}"
    rm -rf -- "${STATE_DIR}"
}

case "${1:-}" in
    up) take_lock; cmd_up ;;
    down) take_lock; cmd_down ;;
    env) cmd_env ;;
    status) cmd_status ;;
    clean) take_lock; cmd_clean ;;
    *)
        echo "usage: $0 up|down|env|status|clean" >&2
        exit 2
        ;;
esac
