package kafkadlq.interop;

import java.util.UUID;

import org.springframework.kafka.listener.DeadLetterPublishingRecoverer;

/**
 * Writes a dead-letter topic with Spring's own DeadLetterPublishingRecoverer: a container whose
 * listener fails every record, with a DefaultErrorHandler that tries each once more and then
 * publishes it to {@code <topic>-dlt} (Spring's default name), same partition.
 */
final class DltWriter {
    private DltWriter() {}

    static boolean run(String brokers, String topic, int count) throws InterruptedException {
        var template = FailingContainer.template(brokers);

        var recoverer = new DeadLetterPublishingRecoverer(template);
        try {
            return FailingContainer.run(brokers, topic, "spring-dlt-writer-" + UUID.randomUUID(), 1L,
                    recoverer, count);
        } finally {
            template.flush();
        }
    }
}
