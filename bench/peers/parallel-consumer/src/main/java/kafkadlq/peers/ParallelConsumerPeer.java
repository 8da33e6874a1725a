package kafkadlq.peers;

import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.logging.Level;
import java.util.logging.Logger;

import io.confluent.parallelconsumer.ParallelConsumerOptions;
import io.confluent.parallelconsumer.ParallelConsumerOptions.ProcessingOrder;
import io.confluent.parallelconsumer.ParallelStreamProcessor;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Confluent's Parallel Consumer in KEY order, what a user picks for key-ordered concurrency:
 * records of one key in order, of different keys concurrently, up to {@code --concurrency}
 * at a time (its thread pool), offsets committed by Parallel Consumer (its default,
 * periodic asynchronous consumer commits, with the incomplete offsets encoded in the commit).
 *
 * <p>Scenarios: {@code slow} (1 ms of work a record) and {@code readme} (the work its README
 * measures: each record's value starts with the milliseconds of work it takes, 0 to 5).
 */
public final class ParallelConsumerPeer {
    private ParallelConsumerPeer() {}

    public static void main(String[] argv) throws Exception {
        Logger.getLogger("").setLevel(Level.WARNING);
        Map<String, String> args = Measure.args(argv);
        String scenario = args.get("scenario");
        Measure measure = new Measure(Long.parseLong(args.get("expect")));

        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args.get("brokers"));
        props.put(ConsumerConfig.GROUP_ID_CONFIG, args.get("group"));
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        var options = ParallelConsumerOptions.<byte[], byte[]>builder()
                .ordering(ProcessingOrder.KEY)
                .maxConcurrency(Integer.parseInt(args.get("concurrency")))
                .consumer(new KafkaConsumer<byte[], byte[]>(props))
                .build();
        ParallelStreamProcessor<byte[], byte[]> pc = ParallelStreamProcessor.createEosStreamProcessor(options);
        pc.subscribe(List.of(args.get("topic")));
        pc.poll(context -> {
            measure.started();
            ConsumerRecord<byte[], byte[]> record = context.getSingleConsumerRecord();
            switch (scenario) {
                case "slow" -> Measure.sleep(1);
                case "readme" -> Measure.sleep(Measure.workMs(record.value()));
                default -> throw new IllegalArgumentException("unknown scenario " + scenario);
            }
            measure.done();
        });
        boolean finished = measure.await();
        System.out.println(measure.figures());
        System.out.flush();
        Runtime.getRuntime().halt(finished ? 0 : 1);
    }
}
