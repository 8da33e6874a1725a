package kafkadlq.peers;

import java.util.HashMap;
import java.util.Map;
import java.util.logging.Level;
import java.util.logging.Logger;

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
import org.springframework.kafka.listener.DefaultAfterRollbackProcessor;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.kafka.listener.MessageListener;
import org.springframework.kafka.support.ExponentialBackOffWithMaxRetries;
import org.springframework.kafka.transaction.KafkaTransactionManager;

/**
 * What a Spring Kafka user writes for kafka-dlq's job: a ConcurrentMessageListenerContainer
 * (concurrency {@code --concurrency}) with a DefaultErrorHandler that retries a failed record
 * up to 10 times with exponential back-off (1 s, x2, at most 30 s), then hands it to a
 * DeadLetterPublishingRecoverer (to {@code <topic>-dlt}); a permanent failure is a
 * not-retryable exception, dead-lettered at once. Offsets are committed by the container
 * (AckMode BATCH, Spring's default).
 *
 * <p>Scenarios, as kafka-dlq-bench's: {@code noop}; {@code poison1} (1% fail permanently);
 * {@code stalled} (the first record of partition 0 fails transiently, so its container thread
 * sits in the back-off); {@code slow} (1 ms of work a record). {@code tx-noop} and
 * {@code tx-poison1} are the same in Spring's transactional set-up, what kafka-dlq's
 * exactly-once mode is compared with: a {@code KafkaTransactionManager} on the container (a
 * transactional producer factory), a {@code DefaultAfterRollbackProcessor} with the same
 * back-off and a transactional {@code DeadLetterPublishingRecoverer}, {@code commitRecovered}
 * on (the dead letter and the skipped offset commit in one transaction), and
 * {@code read_committed} consumers.
 */
public final class SpringPeer {
    private SpringPeer() {}

    /** A failure retrying will not fix: not retryable, so dead-lettered at once. */
    static final class PoisonRecordException extends RuntimeException {
        PoisonRecordException(String message) {
            super(message);
        }
    }

    public static void main(String[] argv) throws Exception {
        Logger.getLogger("").setLevel(Level.WARNING);
        Map<String, String> args = Measure.args(argv);
        String brokers = args.get("brokers");
        String topic = args.get("topic");
        boolean transactional = args.get("scenario").startsWith("tx-");
        String scenario = transactional ? args.get("scenario").substring(3) : args.get("scenario");
        int concurrency = Integer.parseInt(args.get("concurrency"));
        Measure measure = new Measure(Long.parseLong(args.get("expect")));

        Map<String, Object> producerProps = new HashMap<>();
        producerProps.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
        producerProps.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        producerProps.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        var producers = new DefaultKafkaProducerFactory<byte[], byte[]>(producerProps);
        if (transactional) {
            producers.setTransactionIdPrefix("spring-peer-" + args.get("group") + "-");
        }
        var template = new KafkaTemplate<>(producers);
        var recoverer = new DeadLetterPublishingRecoverer(template) {
            @Override
            public void accept(ConsumerRecord<?, ?> record, Consumer<?, ?> consumer, Exception e) {
                super.accept(record, consumer, e); // returns once the broker acknowledged
                measure.done();
            }
        };
        var backOff = new ExponentialBackOffWithMaxRetries(10);
        backOff.setInitialInterval(1_000);
        backOff.setMultiplier(2.0);
        backOff.setMaxInterval(30_000);

        Map<String, Object> consumerProps = new HashMap<>();
        consumerProps.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
        consumerProps.put(ConsumerConfig.GROUP_ID_CONFIG, args.get("group"));
        consumerProps.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        consumerProps.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        consumerProps.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        if (transactional) {
            consumerProps.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        }
        var properties = new ContainerProperties(topic);
        if (transactional) {
            properties.setKafkaAwareTransactionManager(new KafkaTransactionManager<>(producers));
        }
        properties.setMessageListener((MessageListener<byte[], byte[]>) record -> {
            measure.started();
            switch (scenario) {
                case "noop" -> { }
                case "poison1" -> {
                    if (record.offset() % 100 == 0) {
                        throw new PoisonRecordException("poison record");
                    }
                }
                case "stalled" -> {
                    if (record.partition() == 0 && record.offset() == 0) {
                        throw new IllegalStateException("stuck downstream for partition 0");
                    }
                }
                case "slow" -> Measure.sleep(1);
                default -> throw new IllegalArgumentException("unknown scenario " + scenario);
            }
            measure.done();
        });
        var container = new ConcurrentMessageListenerContainer<>(
                new DefaultKafkaConsumerFactory<byte[], byte[]>(consumerProps), properties);
        container.setConcurrency(concurrency);
        if (transactional) {
            var afterRollback = new DefaultAfterRollbackProcessor<byte[], byte[]>(
                    recoverer, backOff, template, true);
            afterRollback.addNotRetryableExceptions(PoisonRecordException.class);
            container.setAfterRollbackProcessor(afterRollback);
        } else {
            var errorHandler = new DefaultErrorHandler(recoverer, backOff);
            errorHandler.addNotRetryableExceptions(PoisonRecordException.class);
            container.setCommonErrorHandler(errorHandler);
        }
        container.start();
        boolean finished = measure.await();
        System.out.println(measure.figures());
        System.out.flush();
        // Not container.stop(): a thread in a 30 s back-off would hold the exit up.
        Runtime.getRuntime().halt(finished ? 0 : 1);
    }
}
