package kafkadlq.peers;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * The share-group peer: what a Java user writes with kafka-clients 4.4's
 * {@code KafkaShareConsumer} for the benchmark's job. {@code --concurrency} members (one
 * consumer and thread each) on one partition; explicit acknowledgement; each record handled
 * with 1 ms of work, then ACCEPTed; at most {@code --max-poll} records per poll
 * ({@code share.acquire.mode=record_limit}, so that one member does not acquire a whole batch).
 * The group starts at the earliest record ({@code share.auto.offset.reset}, set first).
 * Scenario {@code share} handles a poll's records one after another; {@code share-16} hands
 * them to a pool of 16 threads per member, waits for all, then ACCEPTs each on the polling
 * thread ({@code KafkaShareConsumer} is not thread-safe): kafka-dlq's {@code max_in_flight}
 * 16 as a Java user writes it. Prints the FIGURES line once {@code --expect} records are
 * accepted.
 */
public final class SharePeer {
    public static void main(String[] argv) throws Exception {
        Map<String, String> args = new java.util.HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            args.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        }
        String brokers = args.get("brokers");
        String topic = args.get("topic");
        String group = args.get("group");
        long expect = Long.parseLong(args.get("expect"));
        int members = Integer.parseInt(args.getOrDefault("concurrency", "1"));
        int maxPoll = Integer.parseInt(args.getOrDefault("max-poll", "16"));
        boolean concurrent = args.getOrDefault("scenario", "share").equals("share-16");

        Properties admin = new Properties();
        admin.put("bootstrap.servers", brokers);
        try (Admin a = Admin.create(admin)) {
            ConfigResource resource = new ConfigResource(ConfigResource.Type.GROUP, group);
            a.incrementalAlterConfigs(Map.of(resource, List.of(new AlterConfigOp(
                    new ConfigEntry("share.auto.offset.reset", "earliest"),
                    AlterConfigOp.OpType.SET)))).all().get();
        }

        Measure measure = new Measure(expect);
        List<Thread> threads = new ArrayList<>();
        List<KafkaShareConsumer<byte[], byte[]>> consumers = new ArrayList<>();
        List<ExecutorService> pools = new ArrayList<>();
        for (int m = 0; m < members; m++) {
            Properties props = new Properties();
            props.put("bootstrap.servers", brokers);
            props.put("group.id", group);
            props.put("share.acknowledgement.mode", "explicit");
            props.put("share.acquire.mode", "record_limit");
            props.put("max.poll.records", String.valueOf(maxPoll));
            props.put("key.deserializer", ByteArrayDeserializer.class.getName());
            props.put("value.deserializer", ByteArrayDeserializer.class.getName());
            KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(props);
            consumers.add(consumer);
            ExecutorService pool = concurrent ? Executors.newFixedThreadPool(16) : null;
            pools.add(pool);
            Thread t = new Thread(() -> {
                consumer.subscribe(List.of(topic));
                try {
                    while (!Thread.currentThread().isInterrupted()) {
                        ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(500));
                        if (pool == null) {
                            for (ConsumerRecord<byte[], byte[]> record : records) {
                                measure.started();
                                Thread.sleep(1);
                                consumer.acknowledge(record, AcknowledgeType.ACCEPT);
                                measure.done();
                            }
                            continue;
                        }
                        List<Future<?>> calls = new ArrayList<>();
                        for (ConsumerRecord<byte[], byte[]> record : records) {
                            calls.add(pool.submit(() -> {
                                measure.started();
                                Thread.sleep(1);
                                return null;
                            }));
                        }
                        int i = 0;
                        for (ConsumerRecord<byte[], byte[]> record : records) {
                            calls.get(i++).get();
                            consumer.acknowledge(record, AcknowledgeType.ACCEPT);
                            measure.done();
                        }
                    }
                } catch (InterruptedException | org.apache.kafka.common.errors.InterruptException e) {
                    // stopping
                } catch (org.apache.kafka.common.errors.WakeupException e) {
                    // stopping
                } catch (ExecutionException e) {
                    throw new IllegalStateException(e);
                } finally {
                    consumer.close(Duration.ofSeconds(5));
                }
            }, "member-" + m);
            threads.add(t);
            t.start();
        }
        boolean done = measure.await();
        System.out.println(measure.figures());
        System.out.flush();
        for (KafkaShareConsumer<byte[], byte[]> c : consumers) {
            c.wakeup();
        }
        for (Thread t : threads) {
            t.interrupt();
            t.join(10_000);
        }
        for (ExecutorService pool : pools) {
            if (pool != null) {
                pool.shutdownNow();
            }
        }
        System.exit(done ? 0 : 1);
    }
}
