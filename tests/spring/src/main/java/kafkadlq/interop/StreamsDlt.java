package kafkadlq.interop;

import java.time.Duration;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.LogAndContinueExceptionHandler;
import org.apache.kafka.streams.errors.LogAndContinueProcessingExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Kafka Streams' own dead-letter queue (KIP-1034, Kafka Streams 4.2): an application reads
 * TOPIC with String keys and Integer values, doubles each into TOPIC-out and refuses a
 * negative one; `errors.dead.letter.queue.topic.name` sends a record its deserializer cannot
 * read (not 4 bytes) and one its processor refuses to TOPIC-dlt, by Kafka Streams' built-in
 * LogAndContinue handlers. Runs until COUNT dead letters are in TOPIC-dlt and prints one JSON
 * line per dead letter with its headers as Kafka Streams wrote them.
 */
final class StreamsDlt {
    private StreamsDlt() {}

    static boolean run(String brokers, String topic, int count) throws Exception {
        String dlt = topic + "-dlt";
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, topic + "-streams");
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
        props.put(StreamsConfig.ERRORS_DEAD_LETTER_QUEUE_TOPIC_NAME_CONFIG, dlt);
        props.put(StreamsConfig.DESERIALIZATION_EXCEPTION_HANDLER_CLASS_CONFIG,
                LogAndContinueExceptionHandler.class);
        props.put(StreamsConfig.PROCESSING_EXCEPTION_HANDLER_CLASS_CONFIG,
                LogAndContinueProcessingExceptionHandler.class);
        props.put(StreamsConfig.STATE_DIR_CONFIG,
                java.nio.file.Files.createTempDirectory("streams-dlt").toString());
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(topic, Consumed.with(Serdes.String(), Serdes.Integer()))
                .mapValues(amount -> {
                    if (amount < 0) {
                        throw new IllegalArgumentException("negative amount " + amount);
                    }
                    return amount * 2;
                })
                .to(topic + "-out", Produced.with(Serdes.String(), Serdes.Integer()));

        Properties reader = new Properties();
        reader.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
        reader.put(ConsumerConfig.GROUP_ID_CONFIG, topic + "-dlt-reader");
        reader.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        reader.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        reader.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);

        try (KafkaStreams streams = new KafkaStreams(builder.build(), props);
             KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(reader)) {
            streams.start();
            consumer.subscribe(List.of(dlt));
            int seen = 0;
            long deadline = System.currentTimeMillis() + 90_000;
            while (seen < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    seen++;
                    StringBuilder line = new StringBuilder("{\"partition\":").append(r.partition())
                            .append(",\"offset\":").append(r.offset())
                            .append(",\"key\":").append(SpringInterop.base64(r.key()))
                            .append(",\"value\":").append(SpringInterop.base64(r.value()))
                            .append(",\"headers\":{");
                    boolean first = true;
                    for (Header h : r.headers()) {
                        if (!first) {
                            line.append(',');
                        }
                        first = false;
                        line.append(SpringInterop.json(h.key())).append(':')
                                .append(SpringInterop.json(h.value() == null ? null
                                        : new String(h.value(), java.nio.charset.StandardCharsets.UTF_8)));
                    }
                    System.out.println(line.append("}}"));
                }
            }
            streams.close(Duration.ofSeconds(10));
            return seen >= count;
        }
    }
}
