package orderpipe.client;

import java.time.Duration;
import java.util.Objects;

/**
 * How {@link OrderpipeClient}'s retrying calls retry a retriable answer
 * ({@link OrderpipeException#isRetriable()}): at most {@code maxAttempts}
 * attempts within {@code budget}, waiting the answer's {@code Retry-After},
 * or else {@code firstBackoff} doubled per attempt up to {@code maxBackoff}.
 * A wait that would end past the budget is not taken: the last error is
 * thrown instead.
 */
public record RetryPolicy(int maxAttempts, Duration budget, Duration firstBackoff, Duration maxBackoff) {
  public RetryPolicy {
    if (maxAttempts < 1) {
      throw new IllegalArgumentException("maxAttempts must be at least 1, got " + maxAttempts);
    }
    Objects.requireNonNull(budget, "budget");
    Objects.requireNonNull(firstBackoff, "firstBackoff");
    Objects.requireNonNull(maxBackoff, "maxBackoff");
  }

  /** 6 attempts within 10 s, backoff from 100 ms up to 2 s: rides out a gateway's 503 (Retry-After: 1). */
  public static RetryPolicy defaults() {
    return new RetryPolicy(6, Duration.ofSeconds(10), Duration.ofMillis(100), Duration.ofSeconds(2));
  }

  /** One attempt: no retry. */
  public static RetryPolicy none() {
    return new RetryPolicy(1, Duration.ZERO, Duration.ZERO, Duration.ZERO);
  }

  /** The wait before attempt n + 1 (n counts from 1) after error e. */
  Duration waitAfter(int n, OrderpipeException e) {
    if (e.retryAfter().isPresent()) {
      return e.retryAfter().get();
    }
    Duration d = firstBackoff;
    for (int i = 1; i < n && d.compareTo(maxBackoff) < 0; i++) {
      d = d.multipliedBy(2);
    }
    return d.compareTo(maxBackoff) > 0 ? maxBackoff : d;
  }
}
