package kafkadlq.interop;

import java.util.HashMap;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.springframework.context.annotation.AnnotationConfigApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.kafka.annotation.EnableKafka;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.config.ConcurrentKafkaListenerContainerFactory;
import org.springframework.kafka.core.ConsumerFactory;
import org.springframework.kafka.core.DefaultKafkaConsumerFactory;
import org.springframework.kafka.support.KafkaHeaders;
import org.springframework.messaging.handler.annotation.Header;
import org.springframework.messaging.handler.annotation.Payload;

/**
 * Reads a dead-letter topic the way a Spring application does: a {@code @KafkaListener} method
 * that takes the DLT headers with {@code @Header(KafkaHeaders.DLT_ORIGINAL_*)}, the numbers as
 * {@code int} and {@code long} (Spring's own BytesToNumberConverter decodes them from the
 * big-endian bytes its DeadLetterPublishingRecoverer writes).
 */
final class DltReader {
    private DltReader() {}

    static CountDownLatch latch;

    static boolean run(String brokers, String dlt, int count) throws InterruptedException {
        latch = new CountDownLatch(count);
        System.setProperty("interop.brokers", brokers);
        System.setProperty("interop.dlt", dlt);
        System.setProperty("interop.group", "spring-dlt-reader-" + UUID.randomUUID());
        try (var context = new AnnotationConfigApplicationContext(Config.class)) {
            return latch.await(60, TimeUnit.SECONDS);
        }
    }

    @Configuration
    @EnableKafka
    static class Config {
        @Bean
        ConsumerFactory<byte[], byte[]> consumerFactory() {
            Map<String, Object> props = new HashMap<>();
            props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, System.getProperty("interop.brokers"));
            props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
            props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
            return new DefaultKafkaConsumerFactory<>(props);
        }

        @Bean
        ConcurrentKafkaListenerContainerFactory<byte[], byte[]> kafkaListenerContainerFactory(
                ConsumerFactory<byte[], byte[]> consumerFactory) {
            var factory = new ConcurrentKafkaListenerContainerFactory<byte[], byte[]>();
            factory.setConsumerFactory(consumerFactory);
            return factory;
        }

        @Bean
        Listener listener() {
            return new Listener();
        }
    }

    static class Listener {
        @KafkaListener(topics = "${interop.dlt}", groupId = "${interop.group}")
        public void onDeadLetter(
                @Payload(required = false) byte[] value,
                @Header(name = KafkaHeaders.RECEIVED_KEY, required = false) byte[] key,
                @Header(KafkaHeaders.DLT_ORIGINAL_TOPIC) String topic,
                @Header(KafkaHeaders.DLT_ORIGINAL_PARTITION) int partition,
                @Header(KafkaHeaders.DLT_ORIGINAL_OFFSET) long offset,
                @Header(KafkaHeaders.DLT_ORIGINAL_TIMESTAMP) long timestamp,
                @Header(KafkaHeaders.DLT_ORIGINAL_TIMESTAMP_TYPE) String timestampType,
                @Header(KafkaHeaders.DLT_ORIGINAL_CONSUMER_GROUP) String group,
                @Header(KafkaHeaders.DLT_EXCEPTION_FQCN) String fqcn,
                @Header(KafkaHeaders.DLT_EXCEPTION_MESSAGE) String message,
                @Header(KafkaHeaders.DLT_EXCEPTION_STACKTRACE) String stacktrace) {
            String line = "{\"topic\":" + SpringInterop.json(topic)
                    + ",\"partition\":" + partition
                    + ",\"offset\":" + offset
                    + ",\"timestamp\":" + timestamp
                    + ",\"timestamp_type\":" + SpringInterop.json(timestampType)
                    + ",\"group\":" + SpringInterop.json(group)
                    + ",\"fqcn\":" + SpringInterop.json(fqcn)
                    + ",\"message\":" + SpringInterop.json(message)
                    + ",\"stacktrace\":" + SpringInterop.json(stacktrace)
                    + ",\"key\":" + SpringInterop.base64(key)
                    + ",\"value\":" + SpringInterop.base64(value) + "}";
            synchronized (System.out) {
                System.out.println(line);
            }
            latch.countDown();
        }
    }
}
