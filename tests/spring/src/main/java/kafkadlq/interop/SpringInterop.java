package kafkadlq.interop;

import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.logging.Level;
import java.util.logging.Logger;

/**
 * Spring Kafka's and Kafka Streams' own code beside kafka-dlq, driven by tests/spring.rs:
 *
 * <pre>
 *   read-dlt  BROKERS DLT COUNT   a @KafkaListener reads COUNT dead letters from DLT and prints
 *                                 one JSON line per record with what Spring's KafkaHeaders gave
 *   write-dlt BROKERS TOPIC COUNT a container with DefaultErrorHandler and
 *                                 DeadLetterPublishingRecoverer consumes COUNT records of TOPIC,
 *                                 fails each, and so writes them to TOPIC-dlt
 *   read-retry BROKERS TOPIC COUNT Spring's KafkaBackoffAwareMessageListenerAdapter reads COUNT
 *                                 records of a retry topic and prints what it decoded
 *   write-retry BROKERS TOPIC COUNT Spring's retry-topic recoverer moves COUNT records of TOPIC
 *                                 through TOPIC-retry-0 to TOPIC-retry-1 (group TOPIC-g, then
 *                                 the retry endpoint's TOPIC-g-retry-0)
 *   streams-dlt BROKERS TOPIC COUNT a Kafka Streams application with the KIP-1034 dead-letter
 *                                 queue writes COUNT dead letters of TOPIC to TOPIC-dlt
 *                                 ({@link StreamsDlt}) and prints them
 * </pre>
 *
 * Exits 0 when done, 2 on bad arguments, 1 when the records did not come within 60 s.
 */
public final class SpringInterop {
    private SpringInterop() {}

    public static void main(String[] args) throws Exception {
        Logger.getLogger("").setLevel(Level.WARNING);
        if (args.length != 4) {
            System.err.println("usage: SpringInterop read-dlt|write-dlt|read-retry|write-retry|streams-dlt BROKERS TOPIC COUNT");
            System.exit(2);
        }
        int count = Integer.parseInt(args[3]);
        boolean done = switch (args[0]) {
            case "read-dlt" -> DltReader.run(args[1], args[2], count);
            case "write-dlt" -> DltWriter.run(args[1], args[2], count);
            case "read-retry" -> RetryReader.run(args[1], args[2], count);
            case "write-retry" -> RetryWriter.run(args[1], args[2], count);
            case "streams-dlt" -> StreamsDlt.run(args[1], args[2], count);
            default -> {
                System.err.println("unknown mode " + args[0]);
                System.exit(2);
                yield false;
            }
        };
        System.out.flush();
        System.exit(done ? 0 : 1);
    }

    /** A JSON string, or null. */
    static String json(String s) {
        if (s == null) {
            return "null";
        }
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                case '\n' -> b.append("\\n");
                case '\r' -> b.append("\\r");
                case '\t' -> b.append("\\t");
                default -> {
                    if (c < 0x20) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
                }
            }
        }
        return b.append('"').toString();
    }

    /** Bytes as a JSON string of their base64, or null. */
    static String base64(byte[] bytes) {
        return bytes == null ? "null" : json(Base64.getEncoder().encodeToString(bytes));
    }

    static String utf8(byte[] bytes) {
        return bytes == null ? null : new String(bytes, StandardCharsets.UTF_8);
    }
}
