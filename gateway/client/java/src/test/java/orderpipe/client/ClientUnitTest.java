package orderpipe.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.http.HttpHeaders;
import java.time.Duration;
import java.time.ZoneOffset;
import java.time.ZonedDateTime;
import java.time.format.DateTimeFormatter;
import java.util.List;
import java.util.Map;
import orderpipe.client.openapi.model.ErrorCode;
import org.junit.jupiter.api.Test;

/** The hand-written layer's pure parts: header values, Retry-After, waits, error bodies. */
class ClientUnitTest {
  private final OrderpipeClient client = OrderpipeClient.builder("http://127.0.0.1:1").build();

  @Test
  void idempotencyKeyIsAnSfString() {
    assertEquals("\"r-1\"", IdempotencyKey.of("r-1"));
    assertEquals("\"a\\\"b\\\\c\"", IdempotencyKey.of("a\"b\\c"));
    assertThrows(IllegalArgumentException.class, () -> IdempotencyKey.of(""));
    assertThrows(IllegalArgumentException.class, () -> IdempotencyKey.of("r\n1"));
    assertThrows(IllegalArgumentException.class, () -> IdempotencyKey.of("ré"));
  }

  @Test
  void retryAfterSecondsAndHttpDate() {
    assertEquals(Duration.ofSeconds(1), OrderpipeClient.retryAfter("1"));
    assertEquals(Duration.ofSeconds(120), OrderpipeClient.retryAfter(" 120 "));
    assertNull(OrderpipeClient.retryAfter("-1"));
    assertNull(OrderpipeClient.retryAfter("soon"));
    String inAMinute = ZonedDateTime.now(ZoneOffset.UTC).plusSeconds(60).format(DateTimeFormatter.RFC_1123_DATE_TIME);
    Duration d = OrderpipeClient.retryAfter(inAMinute);
    assertTrue(d.compareTo(Duration.ofSeconds(50)) > 0 && d.compareTo(Duration.ofSeconds(61)) <= 0, d.toString());
    String past = ZonedDateTime.now(ZoneOffset.UTC).minusSeconds(60).format(DateTimeFormatter.RFC_1123_DATE_TIME);
    assertEquals(Duration.ZERO, OrderpipeClient.retryAfter(past));
  }

  @Test
  void backoffDoublesUpToItsCapAndRetryAfterWins() {
    RetryPolicy p = new RetryPolicy(10, Duration.ofSeconds(30), Duration.ofMillis(100), Duration.ofMillis(350));
    OrderpipeException noAnswer = new OrderpipeException.NoAnswer("cut", null);
    assertEquals(Duration.ofMillis(100), p.waitAfter(1, noAnswer));
    assertEquals(Duration.ofMillis(200), p.waitAfter(2, noAnswer));
    assertEquals(Duration.ofMillis(350), p.waitAfter(3, noAnswer));
    assertEquals(Duration.ofMillis(350), p.waitAfter(9, noAnswer));
    OrderpipeException busy = client.errorOf(503, headers(Map.of("Retry-After", List.of("2"))),
        "{\"error\":{\"code\":\"UNAVAILABLE\",\"message\":\"order queue unavailable\"}}");
    assertEquals(Duration.ofSeconds(2), p.waitAfter(1, busy));
    assertThrows(IllegalArgumentException.class, () -> new RetryPolicy(0, Duration.ZERO, Duration.ZERO, Duration.ZERO));
  }

  @Test
  void errorBodiesBecomeTypedExceptions() {
    OrderpipeException e = client.errorOf(409, headers(Map.of()), "{\"error\":{\"code\":\"SOLD_OUT\",\"message\":\"not enough stock\"}}");
    assertInstanceOf(OrderpipeException.SoldOut.class, e);
    assertEquals(ErrorCode.SOLD_OUT, e.code());
    assertTrue(!e.isRetriable() && e.getMessage().contains("not enough stock"), e.getMessage());

    // A code newer than this client is still an OrderpipeException, with the generator's unknown case.
    e = client.errorOf(409, headers(Map.of()), "{\"error\":{\"code\":\"SOMETHING_NEW\",\"message\":\"m\"}}");
    assertEquals(OrderpipeException.class, e.getClass());
    assertEquals(ErrorCode.UNKNOWN_DEFAULT_OPEN_API, e.code());

    // A proxy's page: no code, the status still tells it is retriable.
    e = client.errorOf(502, headers(Map.of()), "<html>Bad Gateway</html>");
    assertNull(e.code());
    assertTrue(e.isRetriable() && e.getMessage().contains("Bad Gateway"), e.getMessage());

    // A 409 with Retry-After (the first request with this Idempotency-Key is in progress) is retriable.
    e = client.errorOf(409, headers(Map.of("Retry-After", List.of("1"))), "{\"error\":{\"code\":\"SOMETHING_NEW\",\"message\":\"m\"}}");
    assertTrue(e.isRetriable());
  }

  @Test
  void noAnswerIsRetriedWithinTheBudgetThenThrown() {
    // Port 1 on the loopback refuses: every attempt is NoAnswer.
    int[] retries = {0};
    OrderpipeClient c = OrderpipeClient.builder("http://127.0.0.1:1")
        .retry(new RetryPolicy(3, Duration.ofSeconds(5), Duration.ofMillis(10), Duration.ofMillis(20)))
        .onRetry((n, err) -> retries[0]++)
        .build();
    OrderpipeException e = assertThrows(OrderpipeException.class, () -> c.payRetrying("1-1-abc"));
    assertInstanceOf(OrderpipeException.NoAnswer.class, e);
    assertEquals(0, e.status());
    assertEquals(2, retries[0], "3 attempts are 2 retries");
  }

  private static HttpHeaders headers(Map<String, List<String>> m) {
    return HttpHeaders.of(m, (a, b) -> true);
  }
}
