package kafkadlq.interop;

import java.util.List;

import org.springframework.kafka.retrytopic.DeadLetterPublishingRecovererFactory;
import org.springframework.kafka.retrytopic.DefaultDestinationTopicResolver;
import org.springframework.kafka.retrytopic.DestinationTopic;
import org.springframework.kafka.retrytopic.DestinationTopicPropertiesFactory;
import org.springframework.kafka.retrytopic.DltStrategy;
import org.springframework.kafka.retrytopic.SameIntervalTopicReuseStrategy;
import org.springframework.kafka.retrytopic.TopicSuffixingStrategy;
import org.springframework.kafka.support.ExceptionMatcher;

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
        var template = FailingContainer.template(brokers);

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
        boolean done = FailingContainer.run(brokers, topic, group, 0L, factory.create("main"), count)
                && FailingContainer.run(brokers, topic + "-retry-0", group + "-retry-0", 0L,
                        factory.create("main"), count);
        template.flush();
        return done;
    }
}
