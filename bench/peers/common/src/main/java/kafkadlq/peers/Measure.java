package kafkadlq.peers;

import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;

/**
 * A peer's clock and figures, measured as kafka-dlq-bench measures kafka-dlq: the clock starts
 * when the first record reaches the handler (so the group join is not counted) and stops when
 * the handler is done with the last record it waits for (accepted, or dead-lettered and
 * acknowledged); CPU time is the whole process's (all threads); memory is the peak RSS (VmHWM).
 * {@link #figures()} is the line the benchmark reads:
 * {@code FIGURES <records> <elapsed ns> 0 0 <peak RSS MB> <cpu ns>}.
 */
public final class Measure {
    private final long target;
    private final AtomicLong done = new AtomicLong();
    private volatile long startNanos;
    private volatile long startCpu;
    private volatile long endNanos;
    private volatile long endCpu;

    public Measure(long target) {
        this.target = target;
    }

    /** A record reached the handler. */
    public void started() {
        if (startNanos == 0) {
            synchronized (this) {
                if (startNanos == 0) {
                    startCpu = cpuNanos();
                    startNanos = System.nanoTime();
                }
            }
        }
    }

    /** The handler is done with one more record. */
    public void done() {
        if (done.incrementAndGet() == target) {
            endNanos = System.nanoTime();
            endCpu = cpuNanos();
            synchronized (this) {
                notifyAll();
            }
        }
    }

    /** Waits until every record is done; false after 60 s without progress. */
    public boolean await() throws InterruptedException {
        long last = -1;
        long lastProgress = System.nanoTime();
        while (endNanos == 0) {
            synchronized (this) {
                wait(1000);
            }
            long now = done.get();
            if (now != last) {
                last = now;
                lastProgress = System.nanoTime();
            } else if (System.nanoTime() - lastProgress > 60_000_000_000L) {
                System.err.println("no progress for 60 s at " + now + " of " + target + " records");
                return false;
            }
        }
        return true;
    }

    /** The FIGURES line. */
    public String figures() {
        return "FIGURES " + target + " " + (endNanos - startNanos) + " 0 0 "
                + String.format("%.1f", peakRssMb()) + " " + (endCpu - startCpu);
    }

    static long cpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
                .getProcessCpuTime();
    }

    static double peakRssMb() {
        try {
            for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
                if (line.startsWith("VmHWM:")) {
                    return Double.parseDouble(line.split("\\s+")[1]) / 1024.0;
                }
            }
        } catch (IOException | RuntimeException e) {
            // not Linux: no figure
        }
        return Double.NaN;
    }

    /** {@code --name value} pairs. */
    public static Map<String, String> args(String[] argv) {
        Map<String, String> out = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            if (!argv[i].startsWith("--")) {
                throw new IllegalArgumentException("expected --name value, got " + argv[i]);
            }
            out.put(argv[i].substring(2), argv[i + 1]);
        }
        return out;
    }

    /** Milliseconds of work a record of the `readme` scenario takes: its value's first digit. */
    public static int workMs(byte[] value) {
        return value == null || value.length == 0 ? 0 : Math.max(0, value[0] - '0');
    }

    public static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
