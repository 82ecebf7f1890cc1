package orderpipe.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicLong;
import orderpipe.client.openapi.model.ActivityPreheated;
import orderpipe.client.openapi.model.ActivityUpsert;
import orderpipe.client.openapi.model.ActivityUpsertItemsInner;
import orderpipe.client.openapi.model.ErrorCode;
import orderpipe.client.openapi.model.Order;
import orderpipe.client.openapi.model.OrderCancelled;
import orderpipe.client.openapi.model.OrderPaid;
import orderpipe.client.openapi.model.OrderRequest;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The Java client against a live pipeline (gateway/client/java/live-test.sh,
 * `make test-java`): every call the storefront makes and every error code it
 * can meet, each answer checked against what the pipeline then holds. Its
 * settings are system properties: orderpipe.baseUrl, orderpipe.adminToken,
 * orderpipe.redisAddr (the pipeline's own Redis, which one test pauses) and
 * orderpipe.jdbcUrl (its database, where one test holds a row lock).
 */
class LivePipelineIT {
  static final long HOT = 1, ONE_LEFT = 2, LOCKED = 3, NOT_PREHEATED = 4;
  static final Duration DEADLINE = Duration.ofSeconds(30);

  static OrderpipeClient client;
  static long activityId;
  static final AtomicLong users = new AtomicLong(ThreadLocalRandom.current().nextLong(1_000_000, 1_000_000_000));

  @BeforeAll
  static void sale() {
    String base = property("orderpipe.baseUrl");
    client = OrderpipeClient.builder(base)
        .retry(new RetryPolicy(10, Duration.ofSeconds(20), Duration.ofMillis(100), Duration.ofSeconds(1)))
        .build();
    OrderpipeClient admin = OrderpipeClient.builder(base).token(property("orderpipe.adminToken")).build();
    activityId = ThreadLocalRandom.current().nextLong(1, 1_000_000_000);
    OffsetDateTime now = OffsetDateTime.now(ZoneOffset.UTC);
    // NOT_PREHEATED is no item of the sale: its orders are NOT_ON_SALE.
    ActivityUpsert sale = new ActivityUpsert().name("java client " + activityId)
        .startsAt(now.minusMinutes(1)).endsAt(now.plusHours(1)).perUserLimit(1)
        .items(List.of(item(HOT, 1000), item(ONE_LEFT, 1), item(LOCKED, 1000)));
    admin.call(() -> admin.admin().putActivity(activityId, sale));
    ActivityPreheated p = admin.call(() -> admin.admin().preheatActivity(activityId));
    assertEquals(3, p.getItems().size());

    // Without the admin token the admin API says who may call it.
    OrderpipeException e = assertThrows(OrderpipeException.class, () -> client.call(() -> client.admin().getActivity(activityId)));
    assertInstanceOf(OrderpipeException.Unauthorized.class, e);
    assertEquals(401, e.status());
  }

  @Test
  void placeReplayGetPayAndCancel() {
    OrderRequest r = order(HOT, users.incrementAndGet());
    Placed placed = client.placeOrder(r);
    assertFalse(placed.replayed());
    assertEquals(r.getRequestId(), placed.order().getRequestId());
    assertTrue(placed.order().getRemaining() < 1000);

    Placed again = client.placeOrder(r);
    assertTrue(again.replayed(), "the same request again is a replay");
    assertEquals(placed.orderNo(), again.orderNo(), "a replay never shows another orderNo");

    Order o = client.getOrder(placed.orderNo());
    assertEquals(r.getUserId(), o.getUserId());
    assertTrue(o.getStatus() == Order.StatusEnum.PENDING || o.getStatus() == Order.StatusEnum.UNPAID, o.getStatus().toString());

    OrderPaid paid = client.payRetrying(placed.orderNo());
    assertEquals(OrderPaid.StatusEnum.PAID, paid.getStatus());
    assertEquals(OrderPaid.StatusEnum.PAID, client.pay(placed.orderNo()).getStatus(), "pay is idempotent");
    o = client.getOrder(placed.orderNo());
    assertEquals(Order.StatusEnum.PAID, o.getStatus());
    assertNotNull(o.getPaidAt());
    // ORDER_PAID: a paid order can no longer be cancelled.
    assertEquals(ErrorCode.ORDER_PAID, refused(OrderpipeException.OrderPaid.class, () -> client.cancel(placed.orderNo(), r.getUserId())).code());

    // Another buyer cancels an unpaid order: CLOSED, CANCELLED, and the unit back on sale.
    OrderRequest r2 = order(HOT, users.incrementAndGet());
    Placed p2 = client.placeOrderRetrying(r2);
    awaitStatus(p2.orderNo(), Order.StatusEnum.UNPAID);
    // ORDER_NOT_FOUND: a cancel by someone who is not the buyer.
    refused(OrderpipeException.OrderNotFound.class, () -> client.cancel(p2.orderNo(), r2.getUserId() + 1));
    OrderCancelled c = client.cancelRetrying(p2.orderNo(), r2.getUserId());
    assertEquals(OrderCancelled.StatusEnum.CLOSED, c.getStatus());
    assertEquals(OrderCancelled.ReasonEnum.CANCELLED, c.getReason());
    assertEquals(OrderCancelled.StatusEnum.CLOSED, client.cancel(p2.orderNo(), r2.getUserId()).getStatus(), "cancel is idempotent");
    o = client.getOrder(p2.orderNo());
    assertEquals(Order.StatusEnum.CLOSED, o.getStatus());
    assertEquals(Order.ReasonEnum.CANCELLED, o.getReason());
    // ORDER_CLOSED: a cancelled order cannot be paid.
    refused(OrderpipeException.OrderClosed.class, () -> client.pay(p2.orderNo()));
    // Its buyer may buy again (the live-order marker came back with the unit).
    assertFalse(client.placeOrder(order(HOT, r2.getUserId())).replayed());
  }

  @Test
  void refusalsOfAnOrder() {
    long user = users.incrementAndGet();
    OrderRequest first = order(HOT, user);
    client.placeOrder(first);
    // ALREADY_PURCHASED: a second live order of the same user for the same item.
    refused(OrderpipeException.AlreadyPurchased.class, () -> client.placeOrder(order(HOT, user)));
    // IDEMPOTENCY_KEY_REUSED: the same requestId with another payload (another buyer).
    OrderRequest changed = order(HOT, user + 1_000_000_000L).requestId(first.getRequestId());
    OrderpipeException e = refused(OrderpipeException.IdempotencyKeyReused.class, () -> client.placeOrder(changed));
    assertEquals(422, e.status());
    // INVALID_REQUEST: a quantity out of range, and one over the sale's per-order cap (1).
    e = refused(OrderpipeException.InvalidRequest.class, () -> client.placeOrder(order(HOT, users.incrementAndGet()).quantity(0)));
    assertEquals(400, e.status());
    assertTrue(e.getMessage().contains("quantity"), e.getMessage());
    refused(OrderpipeException.InvalidRequest.class, () -> client.placeOrder(order(HOT, users.incrementAndGet()).quantity(2)));
    // NOT_ON_SALE: an item the sale does not have, and an activity that does not exist.
    refused(OrderpipeException.NotOnSale.class, () -> client.placeOrder(order(NOT_PREHEATED, users.incrementAndGet())));
    refused(OrderpipeException.NotOnSale.class, () -> client.placeOrder(order(HOT, users.incrementAndGet()).activityId(activityId + 1)));
    // SOLD_OUT: the one unit goes to the first buyer; the next one's chance is kept.
    client.placeOrder(order(ONE_LEFT, users.incrementAndGet()));
    e = refused(OrderpipeException.SoldOut.class, () -> client.placeOrder(order(ONE_LEFT, users.incrementAndGet())));
    assertEquals(409, e.status());
    assertFalse(e.isRetriable());
    // ORDER_NOT_FOUND: GET, pay and cancel of a number nobody was given.
    String unknown = activityId + "-" + HOT + "-zzzzzzzz0000";
    refused(OrderpipeException.OrderNotFound.class, () -> client.getOrder(unknown));
    refused(OrderpipeException.OrderNotFound.class, () -> client.pay(unknown));
    refused(OrderpipeException.OrderNotFound.class, () -> client.cancel(unknown, user));
  }

  @Test
  void rateLimitedCarriesRetryAfter() {
    // live-test.sh gives each user a burst of 20 and then one request per 100 s
    // (20: the retries of a 503 in the test below stay well inside it).
    long user = users.incrementAndGet();
    List<ErrorCode> codes = new ArrayList<>();
    OrderpipeException limited = null;
    for (int i = 0; i < 21 && limited == null; i++) {
      OrderpipeException e = assertThrows(OrderpipeException.class, () -> client.placeOrder(order(NOT_PREHEATED, user)));
      codes.add(e.code());
      if (e instanceof OrderpipeException.RateLimited) {
        limited = e;
      }
    }
    assertNotNull(limited, "no 429 in 21 requests of one user: " + codes);
    assertEquals(429, limited.status());
    assertTrue(limited.retryAfter().isPresent() && limited.retryAfter().get().toSeconds() >= 1, limited.retryAfter().toString());
    assertTrue(limited.isRetriable());
  }

  @Test
  void orderPendingWhileTheWorkerCannotCommit() throws SQLException {
    // The worker's transaction updates the item's stock row: while this test
    // holds that row, the reservation cannot become an order, so it stays
    // PENDING and pay answers 409 ORDER_PENDING (with Retry-After).
    OrderRequest r = order(LOCKED, users.incrementAndGet());
    Placed placed;
    try (Connection db = DriverManager.getConnection(property("orderpipe.jdbcUrl"))) {
      db.setAutoCommit(false);
      try (PreparedStatement lock = db.prepareStatement("SELECT stock FROM item_stock WHERE activity_id = ? AND item_id = ? FOR UPDATE")) {
        lock.setLong(1, activityId);
        lock.setLong(2, LOCKED);
        try (ResultSet rs = lock.executeQuery()) {
          assertTrue(rs.next(), "no item_stock row for the locked item");
        }
      }
      placed = client.placeOrder(r);
      assertEquals(Order.StatusEnum.PENDING, client.getOrder(placed.orderNo()).getStatus());
      OrderpipeException e = refused(OrderpipeException.OrderPending.class, () -> client.pay(placed.orderNo()));
      assertTrue(e.isRetriable() && e.retryAfter().isPresent(), e.toString());
      refused(OrderpipeException.OrderPending.class, () -> client.cancel(placed.orderNo(), r.getUserId()));
      db.rollback();
    }
    // Let go, the worker commits it, and the retrying pay that ORDER_PENDING asks for goes through.
    assertEquals(OrderPaid.StatusEnum.PAID, client.payRetrying(placed.orderNo()).getStatus());
  }

  @Test
  void unavailableIsRetriedWithTheSameRequestId() throws IOException {
    // Redis paused past the gateway's REDIS_TIMEOUT (1 s): the reserve
    // times out, 503 UNAVAILABLE with Retry-After, nothing (or nothing
    // visible) reserved. The retrying call comes back with the same request,
    // so the same requestId, until Redis answers: one order, never two.
    OrderRequest r = order(HOT, users.incrementAndGet());
    List<OrderpipeException> retried = new ArrayList<>();
    OrderpipeClient retrying = OrderpipeClient.builder(property("orderpipe.baseUrl"))
        .retry(new RetryPolicy(15, Duration.ofSeconds(30), Duration.ofMillis(200), Duration.ofSeconds(1)))
        .onRetry((n, e) -> retried.add(e))
        .build();
    redis("CLIENT", "PAUSE", "2500", "ALL");
    Placed placed = retrying.placeOrderRetrying(r);
    assertFalse(retried.isEmpty(), "the order went through while Redis was paused: no 503 was seen");
    OrderpipeException first = retried.get(0);
    assertInstanceOf(OrderpipeException.Unavailable.class, first, first.toString());
    assertEquals(503, first.status());
    assertTrue(first.retryAfter().isPresent(), "a 503 without Retry-After");
    for (OrderpipeException e : retried) {
      assertTrue(e.isRetriable(), "retried a refusal: " + e);
    }
    assertEquals(r.getRequestId(), placed.order().getRequestId());
    // One order for the requestId: a replay shows the same number, and it becomes an order.
    assertEquals(placed.orderNo(), client.placeOrderRetrying(r).orderNo());
    assertEquals(Order.StatusEnum.UNPAID, awaitStatus(placed.orderNo(), Order.StatusEnum.UNPAID).getStatus());
  }

  // ---- helpers ----

  static ActivityUpsertItemsInner item(long id, int stock) {
    return new ActivityUpsertItemsInner().itemId(id).stock(stock);
  }

  static OrderRequest order(long item, long user) {
    return new OrderRequest().requestId("java-" + user + "-" + ThreadLocalRandom.current().nextLong(1L << 40))
        .userId(user).activityId(activityId).itemId(item).quantity(1);
  }

  /** Runs call, which must be refused with exactly the exception type want. */
  static <T extends OrderpipeException> T refused(Class<T> want, Runnable call) {
    OrderpipeException e = assertThrows(OrderpipeException.class, call::run);
    return assertInstanceOf(want, e, "got " + e);
  }

  static Order awaitStatus(String orderNo, Order.StatusEnum want) {
    long deadline = System.nanoTime() + DEADLINE.toNanos();
    Order o;
    while ((o = client.getOrder(orderNo)).getStatus() != want) {
      if (System.nanoTime() > deadline) {
        fail("order " + orderNo + " is " + o.getStatus() + ", not " + want + " after " + DEADLINE);
      }
      try {
        Thread.sleep(50);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        fail("interrupted");
      }
    }
    return o;
  }

  static String property(String name) {
    return Objects.requireNonNull(System.getProperty(name), () -> "system property " + name + " is not set (make test-java sets it)");
  }

  /** One Redis command over RESP on the pipeline's own Redis; its reply must be +OK. */
  static void redis(String... args) throws IOException {
    String[] hp = property("orderpipe.redisAddr").split(":");
    try (Socket s = new Socket(hp[0], Integer.parseInt(hp[1]))) {
      s.setSoTimeout(5000);
      StringBuilder b = new StringBuilder("*" + args.length + "\r\n");
      for (String a : args) {
        b.append('$').append(a.getBytes(StandardCharsets.UTF_8).length).append("\r\n").append(a).append("\r\n");
      }
      OutputStream out = s.getOutputStream();
      out.write(b.toString().getBytes(StandardCharsets.UTF_8));
      out.flush();
      InputStream in = s.getInputStream();
      byte[] reply = new byte[64];
      int n = in.read(reply);
      String got = n <= 0 ? "" : new String(reply, 0, n, StandardCharsets.UTF_8).trim();
      assertEquals("+OK", got, "redis " + String.join(" ", args));
    }
  }
}
