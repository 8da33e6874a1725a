package kafkadlq.interop;

import java.util.HashMap;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.springframework.kafka.core.DefaultKafkaConsumerFactory;
import org.springframework.kafka.core.DefaultKafkaProducerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.ConcurrentMessageListenerContainer;
import org.springframework.kafka.listener.ContainerProperties;
import org.springframework.kafka.listener.DeadLetterPublishingRecoverer;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.kafka.listener.MessageListener;
import org.springframework.util.backoff.FixedBackOff;

/**
 * Writes a dead-letter topic with Spring's own DeadLetterPublishingRecoverer: a container whose
 * listener fails every record, with a DefaultErrorHandler that tries each once more and then
 * publishes it to {@code <topic>-dlt} (Spring's default name), same partition.
 */
final class DltWriter {
    private DltWriter() {}

    static boolean run(String brokers, String topic, int count) throws InterruptedException {
        Map<String, Object> producerProps = new HashMap<>();
        producerProps.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
        producerProps.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        producerProps.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        var template = new KafkaTemplate<>(new DefaultKafkaProducerFactory<byte[], byte[]>(producerProps));

        CountDownLatch recovered = new CountDownLatch(count);
        var recoverer = new DeadLetterPublishingRecoverer(template) {
            @Override
            public void accept(ConsumerRecord<?, ?> record, Consumer<?, ?> consumer, Exception exception) {
                super.accept(record, consumer, exception);
                recovered.countDown();
            }
        };
        var errorHandler = new DefaultErrorHandler(recoverer, new FixedBackOff(0L, 1L));

        Map<String, Object> consumerProps = new HashMap<>();
        consumerProps.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
        consumerProps.put(ConsumerConfig.GROUP_ID_CONFIG, "spring-dlt-writer-" + UUID.randomUUID());
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
            template.flush();
        }
    }
}
