package kafkadlq.test;

import java.net.URI;
import java.net.URLDecoder;
import java.net.URLEncoder;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import javax.security.auth.callback.Callback;
import javax.security.auth.callback.UnsupportedCallbackException;
import javax.security.auth.login.AppConfigurationEntry;
import org.apache.kafka.common.security.auth.AuthenticateCallbackHandler;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerExtensionsValidatorCallback;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerToken;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallback;

/**
 * The test broker's check of Amazon MSK IAM tokens (Amazon MSK's own check is not public): a
 * token is the base64url of a SigV4-presigned `GET https://kafka.<region>.amazonaws.com/?
 * Action=kafka-cluster:Connect`, and is valid when its signature is the one the test's secret
 * access key makes (recomputed here, independently of the signer under test), for the test's
 * access key id, not expired and signed within its validity. The access key id and secret come
 * from the listener's JAAS options `accessKeyId` and `secretAccessKey`.
 */
public class MskIamTokenValidator implements AuthenticateCallbackHandler {
    private static final DateTimeFormatter AMZ_DATE =
            DateTimeFormatter.ofPattern("yyyyMMdd'T'HHmmss'Z'").withZone(ZoneOffset.UTC);
    private String accessKeyId;
    private String secretAccessKey;

    @Override
    public void configure(Map<String, ?> configs, String mechanism, List<AppConfigurationEntry> jaas) {
        Map<String, ?> options = jaas.get(0).getOptions();
        accessKeyId = (String) options.get("accessKeyId");
        secretAccessKey = (String) options.get("secretAccessKey");
    }

    @Override
    public void handle(Callback[] callbacks) throws UnsupportedCallbackException {
        for (Callback callback : callbacks) {
            if (callback instanceof OAuthBearerValidatorCallback) {
                OAuthBearerValidatorCallback validator = (OAuthBearerValidatorCallback) callback;
                try {
                    validator.token(validate(validator.tokenValue()));
                } catch (Exception e) {
                    validator.error("invalid_token", null, null);
                }
            } else if (callback instanceof OAuthBearerExtensionsValidatorCallback) {
                OAuthBearerExtensionsValidatorCallback extensions = (OAuthBearerExtensionsValidatorCallback) callback;
                extensions.inputExtensions().map().keySet().forEach(extensions::valid);
            } else {
                throw new UnsupportedCallbackException(callback);
            }
        }
    }

    private OAuthBearerToken validate(String token) throws Exception {
        String url = new String(Base64.getUrlDecoder().decode(token), StandardCharsets.UTF_8);
        URI uri = new URI(url);
        String host = uri.getHost();
        if (!"https".equals(uri.getScheme()) || !host.startsWith("kafka.") || !host.endsWith(".amazonaws.com")) {
            throw new IllegalArgumentException("not an MSK endpoint: " + host);
        }
        String region = host.substring("kafka.".length(), host.length() - ".amazonaws.com".length());
        Map<String, String> query = new TreeMap<>();
        for (String pair : uri.getRawQuery().split("&")) {
            String[] nameValue = pair.split("=", 2);
            query.put(decode(nameValue[0]), nameValue.length > 1 ? decode(nameValue[1]) : "");
        }
        require("kafka-cluster:Connect".equals(query.get("Action")), "Action");
        require("AWS4-HMAC-SHA256".equals(query.get("X-Amz-Algorithm")), "algorithm");
        require("host".equals(query.get("X-Amz-SignedHeaders")), "signed headers");
        String amzDate = query.get("X-Amz-Date");
        String day = amzDate.substring(0, 8);
        String scope = day + "/" + region + "/kafka-cluster/aws4_request";
        require((accessKeyId + "/" + scope).equals(query.get("X-Amz-Credential")), "credential");
        Instant signed = Instant.from(AMZ_DATE.parse(amzDate));
        long expires = Long.parseLong(query.get("X-Amz-Expires"));
        Instant now = Instant.now();
        require(!now.isAfter(signed.plusSeconds(expires)), "expired");
        require(!signed.isAfter(now.plusSeconds(300)), "signed in the future");

        StringBuilder canonicalQuery = new StringBuilder();
        for (Map.Entry<String, String> entry : query.entrySet()) {
            if (entry.getKey().equals("X-Amz-Signature") || entry.getKey().equals("User-Agent")) {
                continue;
            }
            if (canonicalQuery.length() > 0) {
                canonicalQuery.append('&');
            }
            canonicalQuery.append(encode(entry.getKey())).append('=').append(encode(entry.getValue()));
        }
        String canonicalRequest = "GET\n/\n" + canonicalQuery + "\nhost:" + host + "\n\nhost\n" + hex(sha256(new byte[0]));
        String toSign = "AWS4-HMAC-SHA256\n" + amzDate + "\n" + scope + "\n"
                + hex(sha256(canonicalRequest.getBytes(StandardCharsets.UTF_8)));
        byte[] key = hmac(("AWS4" + secretAccessKey).getBytes(StandardCharsets.UTF_8), day);
        key = hmac(key, region);
        key = hmac(key, "kafka-cluster");
        key = hmac(key, "aws4_request");
        String signature = hex(hmac(key, toSign));
        require(MessageDigest.isEqual(
                signature.getBytes(StandardCharsets.US_ASCII),
                query.get("X-Amz-Signature").getBytes(StandardCharsets.US_ASCII)), "signature");

        long start = signed.toEpochMilli();
        long lifetime = signed.plusSeconds(expires).toEpochMilli();
        String principal = accessKeyId;
        return new OAuthBearerToken() {
            @Override public String value() { return token; }
            @Override public Set<String> scope() { return Set.of(); }
            @Override public long lifetimeMs() { return lifetime; }
            @Override public String principalName() { return principal; }
            @Override public Long startTimeMs() { return start; }
        };
    }

    private static void require(boolean holds, String what) {
        if (!holds) {
            throw new IllegalArgumentException("bad " + what);
        }
    }

    private static String decode(String text) {
        return URLDecoder.decode(text, StandardCharsets.UTF_8);
    }

    /** SigV4's encoding: everything but A-Z a-z 0-9 - _ . ~ as %XX. */
    private static String encode(String text) {
        return URLEncoder.encode(text, StandardCharsets.UTF_8)
                .replace("+", "%20").replace("*", "%2A").replace("%7E", "~");
    }

    private static byte[] sha256(byte[] data) throws Exception {
        return MessageDigest.getInstance("SHA-256").digest(data);
    }

    private static byte[] hmac(byte[] key, String data) throws Exception {
        Mac mac = Mac.getInstance("HmacSHA256");
        mac.init(new SecretKeySpec(key, "HmacSHA256"));
        return mac.doFinal(data.getBytes(StandardCharsets.UTF_8));
    }

    private static String hex(byte[] bytes) {
        StringBuilder out = new StringBuilder();
        for (byte b : bytes) {
            out.append(String.format("%02x", b));
        }
        return out.toString();
    }

    @Override
    public void close() {}
}
