package orderpipe.client;

import orderpipe.client.openapi.model.OrderAccepted;

/**
 * The gateway's yes to an order request: the reservation ({@code order}, a
 * 202's body, or the first answer again on a replay) and whether this answer
 * was a replay (200: an earlier attempt with this requestId was accepted, and
 * {@code order.getOrderNo()} is that attempt's orderNo).
 */
public record Placed(OrderAccepted order, boolean replayed) {
  /** The order number to follow with GET, pay and cancel. */
  public String orderNo() {
    return order.getOrderNo();
  }
}
