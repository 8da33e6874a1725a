package kafkadlq.interop;

import java.util.HashMap;
import java.util.List;
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
import org.springframework.kafka.listener.DeadLetterPublishingRecoverer;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.kafka.listener.MessageListener;
import org.springframework.kafka.retrytopic.DeadLetterPublishingRecovererFactory;
import org.springframework.kafka.retrytopic.DefaultDestinationTopicResolver;
import org.springframework.kafka.retrytopic.DestinationTopic;
import org.springframework.kafka.retrytopic.DestinationTopicPropertiesFactory;
import org.springframework.kafka.retrytopic.DltStrategy;
import org.springframework.kafka.retrytopic.SameIntervalTopicReuseStrategy;
import org.springframework.kafka.retrytopic.TopicSuffixingStrategy;
import org.springframework.kafka.support.ExceptionMatcher;
import org.springframework.util.backoff.FixedBackOff;

/**
 * Moves records through Spring's own retry topics, as {@code @RetryableTopic} with topics
 * suffixed by index would: the main listener (group {@code <topic>-g}) fails each record of
 * TOPIC and Spring's DeadLetterPublishingRecovererFactory publishes it to
 * {@code <topic>-retry-0}; the retry endpoint's listener (group {@code <topic>-g-retry-0}, the
 * suffixed group id Spring gives retry endpoints) fails it again and the factory's recoverer
 * publishes it to {@code <topic>-retry-1}, due one second later.
 */
final class RetryWriter {
    private RetryWriter() {}

    static boolean run(String brokers, String topic, int count) throws InterruptedException {
        Map<String, Object> producerProps = new HashMap<>();
        producerProps.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
        producerProps.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        producerProps.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        var template = new KafkaTemplate<>(new DefaultKafkaProducerFactory<byte[], byte[]>(producerProps));

        // What @RetryableTopic(attempts = 3, backoff 1 s, SUFFIX_WITH_INDEX_VALUE) configures.
        var properties = new DestinationTopicPropertiesFactory("-retry", "-dlt", List.of(1000L, 1000L),
                ExceptionMatcher.defaultMatcher(), 1, template, DltStrategy.FAIL_ON_ERROR,
                TopicSuffixingStrategy.SUFFIX_WITH_INDEX_VALUE,
                SameIntervalTopicReuseStrategy.MULTIPLE_TOPICS, 600_000L).createProperties();
        var resolver = new DefaultDestinationTopicResolver();
        resolver.addDestinationTopics("main", properties.stream()
                .map(p -> new DestinationTopic(topic + p.suffix(), p))
                .toList());
        var factory = new DeadLetterPublishingRecovererFactory(resolver);

        String group = topic + "-g";
        boolean done = stage(brokers, topic, group, factory.create("main"), count)
                && stage(brokers, topic + "-retry-0", group + "-retry-0", factory.create("main"), count);
        template.flush();
        return done;
    }

    /** A container of {@code group} on {@code topic} whose listener fails every record once. */
    private static boolean stage(String brokers, String topic, String group,
            DeadLetterPublishingRecoverer recoverer, int count) throws InterruptedException {
        CountDownLatch recovered = new CountDownLatch(count);
        ConsumerAwareRecordRecoverer counting = (record, consumer, exception) -> {
            recoverer.accept(record, consumer, exception);
            recovered.countDown();
        };
        var errorHandler = new DefaultErrorHandler(counting, new FixedBackOff(0L, 0L));

        Map<String, Object> consumerProps = new HashMap<>();
        consumerProps.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
        consumerProps.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        consumerProps.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        consumerProps.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        consumerProps.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        var properties = new ContainerProperties(topic);
        properties.setMessageListener((MessageListener<byte[], byte[]>) record -> {
            throw new RuntimeException("inventory service unavailable at offset " + record.offset());
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
