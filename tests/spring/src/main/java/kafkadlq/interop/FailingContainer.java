package kafkadlq.interop;

import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.springframework.kafka.core.DefaultKafkaConsumerFactory;
import org.springframework.kafka.core.DefaultKafkaProducerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.ConcurrentMessageListenerContainer;
import org.springframework.kafka.listener.ConsumerAwareRecordRecoverer;
import org.springframework.kafka.listener.ContainerProperties;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.kafka.listener.MessageListener;
import org.springframework.util.backoff.FixedBackOff;

/**
 * A Spring listener container of {@code group} on {@code topic} whose listener fails every
 * record, with a DefaultErrorHandler that tries each {@code retries} more times and then hands
 * it to {@code recoverer}.
 */
final class FailingContainer {
    private FailingContainer() {}

    /** A template writing bytes to {@code brokers}, as the recoverers publish with. */
    static KafkaTemplate<byte[], byte[]> template(String brokers) {
        Map<String, Object> producerProps = new HashMap<>();
        producerProps.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
        producerProps.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        producerProps.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        return new KafkaTemplate<>(new DefaultKafkaProducerFactory<byte[], byte[]>(producerProps));
    }

    /** Runs until {@code count} records were recovered (true) or 60 s passed (false). */
    static boolean run(String brokers, String topic, String group, long retries,
            ConsumerAwareRecordRecoverer recoverer, int count) throws InterruptedException {
        CountDownLatch recovered = new CountDownLatch(count);
        ConsumerAwareRecordRecoverer counting = (record, consumer, exception) -> {
            recoverer.accept(record, consumer, exception);
            recovered.countDown();
        };
        var errorHandler = new DefaultErrorHandler(counting, new FixedBackOff(0L, retries));

        Map<String, Object> consumerProps = new HashMap<>();
        consumerProps.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
        consumerProps.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        consumerProps.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        consumerProps.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        consumerProps.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        var properties = new ContainerProperties(topic);
        properties.setMessageListener((MessageListener<byte[], byte[]>) record -> {
            throw new IllegalStateException("spring rejected offset " + record.offset());
        });
        var container = new ConcurrentMessageListenerContainer<>(
                new DefaultKafkaConsumerFactory<byte[], byte[]>(consumerProps), properties);
        container.setCommonErrorHandler(errorHandler);
        container.start();
        try {
            return recovered.await(60, TimeUnit.SECONDS);
        } finally {
            container.stop();
        }
    }
}
