package kafkadlq.interop;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Clock;
import java.util.HashMap;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.springframework.kafka.core.DefaultKafkaConsumerFactory;
import org.springframework.kafka.listener.ConcurrentMessageListenerContainer;
import org.springframework.kafka.listener.ContainerProperties;
import org.springframework.kafka.listener.KafkaConsumerBackoffManager;
import org.springframework.kafka.listener.MessageListener;
import org.springframework.kafka.listener.adapter.KafkaBackoffAwareMessageListenerAdapter;
import org.springframework.kafka.support.KafkaHeaders;

/**
 * Reads a retry topic the way Spring's non-blocking retries do: through Spring's own
 * KafkaBackoffAwareMessageListenerAdapter, which decodes each record's
 * {@code retry_topic-backoff-timestamp} and hands the due time to the backoff manager (here one
 * that records it instead of pausing). Prints one JSON line per record: the due time Spring
 * decoded, the delivery count of {@code retry_topic-attempts} and the original coordinates of
 * the {@code kafka_dlt-original-*} headers, each decoded as Spring decodes them (big-endian
 * int and long).
 */
final class RetryReader {
    private RetryReader() {}

    static boolean run(String brokers, String topic, int count) throws InterruptedException {
        CountDownLatch done = new CountDownLatch(count);
        AtomicLong due = new AtomicLong(Long.MIN_VALUE);
        KafkaConsumerBackoffManager manager = context -> due.set(context.getDueTimestamp());
        MessageListener<byte[], byte[]> delegate = record -> {
            Headers headers = record.headers();
            String line = "{\"due\":" + due.getAndSet(Long.MIN_VALUE)
                    + ",\"attempts\":" + ByteBuffer.wrap(value(headers, "retry_topic-attempts")).getInt()
                    + ",\"topic\":" + SpringInterop.json(
                            new String(value(headers, KafkaHeaders.DLT_ORIGINAL_TOPIC), StandardCharsets.UTF_8))
                    + ",\"partition\":" + ByteBuffer.wrap(value(headers, KafkaHeaders.DLT_ORIGINAL_PARTITION)).getInt()
                    + ",\"offset\":" + ByteBuffer.wrap(value(headers, KafkaHeaders.DLT_ORIGINAL_OFFSET)).getLong()
                    + ",\"value\":" + SpringInterop.base64(record.value()) + "}";
            synchronized (System.out) {
                System.out.println(line);
            }
            done.countDown();
        };
        var adapter = new KafkaBackoffAwareMessageListenerAdapter<byte[], byte[]>(
                delegate, manager, "interop-retry-reader", Clock.systemUTC());

        Map<String, Object> props = new HashMap<>();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, "spring-retry-reader-" + UUID.randomUUID());
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        var properties = new ContainerProperties(topic);
        properties.setMessageListener(adapter);
        var container = new ConcurrentMessageListenerContainer<>(
                new DefaultKafkaConsumerFactory<byte[], byte[]>(props), properties);
        container.start();
        try {
            return done.await(60, TimeUnit.SECONDS);
        } finally {
            container.stop();
        }
    }

    private static byte[] value(Headers headers, String name) {
        Header header = headers.lastHeader(name);
        if (header == null) {
            throw new IllegalStateException("no " + name + " header");
        }
        return header.value();
    }
}
