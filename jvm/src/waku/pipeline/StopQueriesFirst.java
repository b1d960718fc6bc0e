package waku.pipeline;

import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.util.ShutdownHookManager;
import org.apache.logging.log4j.Level;
import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.core.config.Configurator;
import org.apache.spark.JobExecutionStatus;
import org.apache.spark.SparkJobInfo;
import org.apache.spark.SparkStageInfo;
import org.apache.spark.SparkStatusTracker;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.streaming.StreamingQuery;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import scala.Option;

import java.util.Collections;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;

/**
 * A driver's streaming queries are stopped before its SparkContext when the JVM shuts down (a
 * job's SIGTERM: `make run`'s Ctrl-C, a service manager's stop, the tests' stop of a job's
 * process group).
 *
 * <p>Spark stops the SparkContext in a shutdown hook (Hadoop's hook manager, priority
 * {@code FileSystem.SHUTDOWN_HOOK_PRIORITY + 30}) and has none for Structured Streaming: a query
 * whose Spark job was running when the context stopped ends "terminated with error" ("Job N
 * cancelled because SparkContext was shut down", or a NullPointerException from a context
 * half-stopped), three ERROR lines and a stack trace in the log of every stop. This hook runs
 * first (a higher priority) and stops each active query the way {@code StreamingQuery.stop()}
 * does: the running batch is cancelled, the query ends stopped, not failed; what it had not
 * committed is read again by the next run (Kafka offsets in the checkpoint), as after any stop.
 * A {@code foreachBatch} batch (the store and subscriptions jobs) running at that moment still
 * fails: its Python function died with the driver's Python process on the same signal.
 */
public final class StopQueriesFirst {
    private static final Logger LOG = LoggerFactory.getLogger(StopQueriesFirst.class);
    /** Above Spark's own shutdown hook (FileSystem.SHUTDOWN_HOOK_PRIORITY + 30). */
    public static final int PRIORITY = FileSystem.SHUTDOWN_HOOK_PRIORITY + 40;

    private static final Set<SparkSession> INSTALLED = Collections.synchronizedSet(
            Collections.newSetFromMap(new IdentityHashMap<>()));

    private StopQueriesFirst() {
    }

    /**
     * Registers the hook for `session`'s queries, once per session; `timeoutSeconds`: how long
     * the stops may take in all (then Spark's hook stops the context anyway).
     */
    public static void install(SparkSession session, long timeoutSeconds) {
        if (INSTALLED.add(session)) {
            // Its lines are said at INFO under a driver's WARN root (spark.driver.extraJavaOptions).
            Configurator.setLevel(StopQueriesFirst.class.getName(), Level.INFO);
            ShutdownHookManager.get().addShutdownHook(() -> stopAll(session), PRIORITY, timeoutSeconds,
                    TimeUnit.SECONDS);
        }
    }

    /**
     * Loggers kept quieter during a stop, and the level each gets. The scheduler's lines about
     * the tasks and job groups a stop cancels ("Lost task ... TaskKilled", "Failed to cancel job
     * group"), each a WARN of an expected event here, are kept to errors; the DataSource V2
     * writer's about the epoch a stop aborts ("Data source write support ... is aborting",
     * "Aborting task" with the Kafka producer's InterruptException: an ERROR and a stack trace
     * per task of a real-time query, whose epoch a restart replays) are off.
     */
    private static final Map<String, Level> QUIET = Map.of(
            "org.apache.spark.scheduler.TaskSetManager", Level.ERROR,
            "org.apache.spark.scheduler.DAGScheduler", Level.ERROR,
            "org.apache.spark.sql.execution.datasources.v2", Level.OFF,
            "org.apache.spark.util.Utils", Level.OFF);  // "Aborting task"

    /** Sets the QUIET levels; returns the levels they had. */
    private static Map<String, Level> quiet() {
        Map<String, Level> before = new HashMap<>();
        for (Map.Entry<String, Level> e : QUIET.entrySet()) {
            before.put(e.getKey(), LogManager.getLogger(e.getKey()).getLevel());
            Configurator.setLevel(e.getKey(), e.getValue());
        }
        return before;
    }

    /**
     * Stops `query` (a running batch or real-time epoch cancelled) with the lines about what the
     * stop cancels kept quiet, as at shutdown, until none of the query's own Spark jobs runs and
     * their tasks have ended (its job group is its run id; up to 10 s: the cancelled tasks end
     * after stop() returns), then gives the loggers their levels back: for a program that stops
     * a query of its own while the JVM and its other queries go on (the filter job's warm-up).
     * Returns the milliseconds the wait for the query's jobs took.
     */
    public static long stopQuietly(StreamingQuery query) throws java.util.concurrent.TimeoutException {
        Map<String, Level> before;
        synchronized (QUIET) {
            before = quiet();
        }
        long stopped = System.nanoTime();
        try {
            query.stop();
            stopped = System.nanoTime();
            // The cancelled tasks end (and log their abort) after stop() returns: wait for them.
            SparkStatusTracker tracker = query.sparkSession().sparkContext().statusTracker();
            String group = query.runId().toString();
            long deadline = stopped + TimeUnit.SECONDS.toNanos(10);
            while (running(tracker, group) && System.nanoTime() < deadline) {
                Thread.sleep(20);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } finally {
            synchronized (QUIET) {
                before.forEach(Configurator::setLevel);
            }
        }
        return TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - stopped);
    }

    /**
     * Whether a job of `group` (a streaming query's run id) still runs or has a task that has
     * not ended (a cancelled job ends at once; its killed tasks, each a "Lost task" line, later).
     */
    static boolean running(SparkStatusTracker tracker, String group) {
        for (int id : tracker.getJobIdsForGroup(group)) {
            Option<SparkJobInfo> job = tracker.getJobInfo(id);
            if (job.isEmpty()) {
                continue;
            }
            if (job.get().status() == JobExecutionStatus.RUNNING) {
                return true;
            }
            for (int stage : job.get().stageIds()) {
                Option<SparkStageInfo> info = tracker.getStageInfo(stage);
                if (info.isDefined() && info.get().numActiveTasks() > 0) {
                    return true;
                }
            }
        }
        return false;
    }

    public static int stopAll(SparkSession session) {
        if (session.sparkContext().isStopped()) {
            return 0;  // stopped by its program before the JVM's shutdown: no query runs
        }
        StreamingQuery[] active;
        try {
            active = session.streams().active();
        } catch (IllegalStateException e) {  // the context stopped meanwhile
            return 0;
        }
        int stopped = 0;
        long began = System.nanoTime();
        if (active.length > 0) {
            quiet();
        }
        for (StreamingQuery query : active) {
            String name = query.name() != null ? query.name() : query.id().toString();
            LOG.info("shutting down: stopping streaming query {} before the SparkContext", name);
            try {
                query.stop();
                stopped++;
            } catch (Exception e) {
                LOG.warn("shutting down: stopping streaming query {} failed: {}", name, e.toString());
            }
        }
        if (stopped > 0) {
            LOG.info("shutting down: {} streaming queries stopped in {} ms", stopped,
                    (System.nanoTime() - began) / 1_000_000);
        }
        return stopped;
    }
}
