package orderpipe.client;

import java.time.Duration;
import java.util.Optional;
import orderpipe.client.openapi.model.ErrorCode;

/**
 * An answer of the gateway that is not a success, or no answer at all. Each
 * error code a storefront acts on is a subclass ({@link SoldOut},
 * {@link AlreadyPurchased}, ...), so a caller catches what it handles;
 * {@link #code()} is the code as openapi.json's {@code ErrorCode} names it,
 * for the rest. Unchecked, as Spring code expects.
 */
public class OrderpipeException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  private final int status;
  private final ErrorCode code;
  private final Duration retryAfter;

  OrderpipeException(int status, ErrorCode code, String message, Duration retryAfter, Throwable cause) {
    super(message, cause);
    this.status = status;
    this.code = code;
    this.retryAfter = retryAfter;
  }

  /** The HTTP status; 0 when no answer came ({@link NoAnswer}). */
  public int status() {
    return status;
  }

  /**
   * The API's error code; {@code UNKNOWN_DEFAULT_OPEN_API} for a code newer
   * than this client; null when no answer came or the answer had no API error
   * body (a proxy's page).
   */
  public ErrorCode code() {
    return code;
  }

  /** The answer's {@code Retry-After} (429, 503, 409 in progress), if any. */
  public Optional<Duration> retryAfter() {
    return Optional.ofNullable(retryAfter);
  }

  /**
   * Whether the same call may be sent again and may get another answer: no
   * answer came, or the gateway said to come back (429, 5xx, ORDER_PENDING,
   * a 409 with Retry-After). For an order, retry with the same requestId: a
   * retry of an accepted request is a replay, never a second order.
   */
  public boolean isRetriable() {
    return status == 0 || status == 429 || status >= 500 || code == ErrorCode.ORDER_PENDING
        || (status == 409 && retryAfter != null);
  }

  /** The typed exception for an error answer. */
  static OrderpipeException of(int status, ErrorCode code, String message, Duration retryAfter) {
    String text = status + " " + (code == null ? "(no API error body)" : code.getValue()) + ": " + message;
    if (code == null) {
      return new OrderpipeException(status, null, text, retryAfter, null);
    }
    switch (code) {
      case INVALID_REQUEST: return new InvalidRequest(status, text, retryAfter);
      case UNAUTHORIZED: return new Unauthorized(status, text, retryAfter);
      case NOT_ON_SALE: return new NotOnSale(status, text, retryAfter);
      case ORDER_NOT_FOUND: return new OrderNotFound(status, text, retryAfter);
      case SOLD_OUT: return new SoldOut(status, text, retryAfter);
      case ALREADY_PURCHASED: return new AlreadyPurchased(status, text, retryAfter);
      case ORDER_CLOSED: return new OrderClosed(status, text, retryAfter);
      case ORDER_PAID: return new OrderPaid(status, text, retryAfter);
      case ORDER_PENDING: return new OrderPending(status, text, retryAfter);
      case ORDER_REJECTED: return new OrderRejected(status, text, retryAfter);
      case IDEMPOTENCY_KEY_REUSED: return new IdempotencyKeyReused(status, text, retryAfter);
      case RATE_LIMITED: return new RateLimited(status, text, retryAfter);
      case UNAVAILABLE: return new Unavailable(status, text, retryAfter);
      default: return new OrderpipeException(status, code, text, retryAfter, null);
    }
  }

  /** No answer came: connection refused or cut, or the request timed out. The outcome is unknown. */
  public static final class NoAnswer extends OrderpipeException {
    private static final long serialVersionUID = 1L;

    NoAnswer(String message, Throwable cause) {
      super(0, null, message, null, cause);
    }
  }

  /** 400 INVALID_REQUEST: a field is malformed or out of range (the message names it). Nothing changed. */
  public static final class InvalidRequest extends OrderpipeException {
    private static final long serialVersionUID = 1L;

    InvalidRequest(int status, String message, Duration retryAfter) {
      super(status, ErrorCode.INVALID_REQUEST, message, retryAfter, null);
    }
  }

  /** 401 UNAUTHORIZED: the gateway wants another bearer token (API_TOKENS, or ADMIN_TOKEN for the admin API). */
  public static final class Unauthorized extends OrderpipeException {
    private static final long serialVersionUID = 1L;

    Unauthorized(int status, String message, Duration retryAfter) {
      super(status, ErrorCode.UNAUTHORIZED, message, retryAfter, null);
    }
  }

  /** 404 NOT_ON_SALE: the activity item is not preheated, or its sale window is not open. */
  public static final class NotOnSale extends OrderpipeException {
    private static final long serialVersionUID = 1L;

    NotOnSale(int status, String message, Duration retryAfter) {
      super(status, ErrorCode.NOT_ON_SALE, message, retryAfter, null);
    }
  }

  /** 404 ORDER_NOT_FOUND: no order has this number (or, on cancel, it is another user's). */
  public static final class OrderNotFound extends OrderpipeException {
    private static final long serialVersionUID = 1L;

    OrderNotFound(int status, String message, Duration retryAfter) {
      super(status, ErrorCode.ORDER_NOT_FOUND, message, retryAfter, null);
    }
  }

  /** 409 SOLD_OUT: not enough stock; the user's chance is kept. */
  public static final class SoldOut extends OrderpipeException {
    private static final long serialVersionUID = 1L;

    SoldOut(int status, String message, Duration retryAfter) {
      super(status, ErrorCode.SOLD_OUT, message, retryAfter, null);
    }
  }

  /** 409 ALREADY_PURCHASED: the user holds a live order for this activity item. */
  public static final class AlreadyPurchased extends OrderpipeException {
    private static final long serialVersionUID = 1L;

    AlreadyPurchased(int status, String message, Duration retryAfter) {
      super(status, ErrorCode.ALREADY_PURCHASED, message, retryAfter, null);
    }
  }

  /** 409 ORDER_CLOSED: the order was closed (payment timeout or cancelled); it can be neither paid nor cancelled. */
  public static final class OrderClosed extends OrderpipeException {
    private static final long serialVersionUID = 1L;

    OrderClosed(int status, String message, Duration retryAfter) {
      super(status, ErrorCode.ORDER_CLOSED, message, retryAfter, null);
    }
  }

  /** 409 ORDER_PAID: the order is paid; it can no longer be cancelled. */
  public static final class OrderPaid extends OrderpipeException {
    private static final long serialVersionUID = 1L;

    OrderPaid(int status, String message, Duration retryAfter) {
      super(status, ErrorCode.ORDER_PAID, message, retryAfter, null);
    }
  }

  /** 409 ORDER_PENDING: reserved but not persisted yet; retry shortly (retriable). */
  public static final class OrderPending extends OrderpipeException {
    private static final long serialVersionUID = 1L;

    OrderPending(int status, String message, Duration retryAfter) {
      super(status, ErrorCode.ORDER_PENDING, message, retryAfter, null);
    }
  }

  /** 409 ORDER_REJECTED: the request was rejected by Postgres; there is no order to pay or cancel. */
  public static final class OrderRejected extends OrderpipeException {
    private static final long serialVersionUID = 1L;

    OrderRejected(int status, String message, Duration retryAfter) {
      super(status, ErrorCode.ORDER_REJECTED, message, retryAfter, null);
    }
  }

  /** 422 IDEMPOTENCY_KEY_REUSED: this requestId (Idempotency-Key) was used with another payload. Nothing reserved. */
  public static final class IdempotencyKeyReused extends OrderpipeException {
    private static final long serialVersionUID = 1L;

    IdempotencyKeyReused(int status, String message, Duration retryAfter) {
      super(status, ErrorCode.IDEMPOTENCY_KEY_REUSED, message, retryAfter, null);
    }
  }

  /** 429 RATE_LIMITED: the user's (or the gateway's) rate limit; come back after {@link #retryAfter()}. */
  public static final class RateLimited extends OrderpipeException {
    private static final long serialVersionUID = 1L;

    RateLimited(int status, String message, Duration retryAfter) {
      super(status, ErrorCode.RATE_LIMITED, message, retryAfter, null);
    }
  }

  /** 503 UNAVAILABLE: a store is down; nothing is reserved. Retry after {@link #retryAfter()} with the same requestId. */
  public static final class Unavailable extends OrderpipeException {
    private static final long serialVersionUID = 1L;

    Unavailable(int status, String message, Duration retryAfter) {
      super(status, ErrorCode.UNAVAILABLE, message, retryAfter, null);
    }
  }
}
